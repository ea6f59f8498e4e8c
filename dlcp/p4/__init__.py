"""The P4 spec: what the programs, the controller, the switches and their tests share.

Table, action and key names (:mod:`.names`), the switch's sizes (:mod:`.sizes`), the constants
generated for every target (:mod:`.gen_constants`, :mod:`.generated`), reading a P4Info (:mod:`.p4info`),
the shared switch test vectors (:mod:`.vectors`, :mod:`.vector_gen`), the names in the P4 sources
(:mod:`.source_names`) and the paths of the sources and build outputs (:mod:`.paths`). It runs no
program: the compilers and BMv2 are the toolchain's (:mod:`dlcp.testbed.toolchain`).
"""
