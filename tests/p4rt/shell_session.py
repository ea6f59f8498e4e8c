"""A p4runtime-shell session, run by tests/p4rt/test_shell.py in .venv-p4rt-shell (not by pytest).

argv: ADDR P4INFO DEVICE_CONFIG. Prints one JSON line per step; after inserting
the route it waits for a line on stdin, so the test can look at the switch.
"""

import json
import sys

import p4runtime_sh.shell as sh

ROUTES = "DlcpIngress.routing.ipv4_routes"


def report(step, **values):
    print(json.dumps({"step": step, **values}), flush=True)


def entries():
    """Every table's entries, read table by table, as the shell prints them."""
    out = {}
    for table in sh.P4Objects(sh.P4Type.table):
        out[table.name] = [str(te) for te in sh.TableEntry(table.name).read()]
    return out


def routes():
    """The routes as the shell reads them: [prefix bytes (hex), prefix length, group bytes (hex)]."""
    out = []
    for te in sh.TableEntry(ROUTES).read():
        msg = te.msg()
        lpm = msg.match[0].lpm
        out.append([lpm.value.hex(), lpm.prefix_len, msg.action.action.params[0].value.hex()])
    return out


addr, p4info, blob = sys.argv[1:4]
sh.setup(device_id=1, grpc_addr=addr, election_id=(0, 1), config=sh.FwdPipeConfig(p4info, blob), verbose=False)
try:
    report("tables", entries=entries())
    te = sh.TableEntry(ROUTES)(action="DlcpIngress.routing.set_next_hop_group")
    te.match["dst_addr"] = "10.5.0.0/16"
    te.action["group"] = "3"
    te.insert()
    report("inserted", routes=routes())
    sys.stdin.readline()
    te.delete()
    report("deleted", routes=routes())
finally:
    sh.teardown()
