"""The P4 toolchain: p4c and the Tofino compiler (:mod:`.build`), finding the tools (:mod:`.tools`), the Tofino
compiler's resource reports (:mod:`.tofino_report`).

It runs external programs, so it is not part of the core spec (:mod:`dlcp.p4`: names, sizes, generated
constants, P4Info, vectors and the paths of build outputs, which is all the controller and the switch read).
``dlcp p4`` and the BMv2 runner (:mod:`dlcp.testbed.bmv2`) use it; nothing runs at import time.
"""
