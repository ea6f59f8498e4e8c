"""Hand-run example for docs/controller.md (needs root): a DLCP software switch for a star fabric file.

The switch runs on veth pairs in a ``dlcp-`` namespace this script creates and removes, serves
P4Runtime on 127.0.0.1:9559 and takes the link rates from the fabric file. After a line on stdin
it sends 300 DLCP pushes from h1..h3 to h4 (raw frames on the host ends of the veths, addressed
from the fabric file), then runs until Ctrl-C or SIGTERM.

    sudo .venv/bin/python docs/examples/controller_switch.py docs/examples/star.toml
"""

import signal
import sys
import threading
from dataclasses import replace

from dlcp import protocol
from dlcp.controller import fabric
from dlcp.controller.model import mac_text
from dlcp.frames import build_udp_frame
from dlcp.protocol import MessageKind, PacketType
from dlcp.testbed.rig import VethSwitch
from dlcp.testbed.switch.p4rt.server import start_server
from dlcp.wire import Header

done = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: done.set())
signal.signal(signal.SIGINT, lambda *_: done.set())
with VethSwitch([1, 2, 3, 4], buffer=1 << 20, tag="ctl-example") as rig:
    server = start_server(rig.dp, "127.0.0.1:9559", device_id=1)
    print("switch up", flush=True)
    fab = fabric.load(sys.argv[1])
    for port in rig.dp.ports:  # link rates are the switch's to carry out (P4Runtime has no say in them)
        rate = fab.link_of("s1", port).rate_bps
        if rate:
            rig.dp.configure_port(replace(rig.dp.ports[port], rate_bps=rate))
    sys.stdin.readline()  # the controller applies in between; a line on stdin starts the traffic
    for seq in range(300):
        src = f"h{1 + seq % 3}"
        s, d = fab.hosts[src], fab.hosts["h4"]
        h = Header(
            type=PacketType.DATA, priority=6 - seq % 7, drop_class=seq % 2, job_id=7, kind=MessageKind.PUSH,
            seq=seq, length=8192,
        )  # fmt: skip
        frame = build_udp_frame(
            eth_src=mac_text(s.mac), eth_dst=mac_text(fab.gateway_mac(src)), src_ip=s.ip, dst_ip=d.ip,
            sport=40000, dport=19111, payload=h.pack() + bytes(8192), tos=protocol.tos_for(h.priority, h.drop_class),
        )  # fmt: skip
        rig.send(s.port, frame)
    print("sent 300 frames", flush=True)
    done.wait()
    server.stop(0)
