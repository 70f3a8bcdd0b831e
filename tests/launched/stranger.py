#!/usr/bin/env python3
"""A stranger on a node of the step: connects to every listening port of the processes named
TARGET in this network namespace, again and again until they are gone, and (a) stays silent,
(b) sends garbage, (c) sends a well-formed jobkit frame header with absurd sizes, (d) answers the
handshake's challenge with a hello claiming to be a real rank but without the secret.
usage: stranger.py TARGET WORLD_SIZE [READY_DIR]   (READY_DIR: where it leaves ready.<host> once it
looks for ports, so that the step starts after every stranger does)"""
import os
import socket
import struct
import subprocess
import sys
import time

target, world_size = sys.argv[1], int(sys.argv[2])
ready_dir = sys.argv[3] if len(sys.argv) > 3 else None
my_netns = os.stat("/proc/self/ns/net").st_ino


def socket_inodes(pid):
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:  # a churning rank opens and closes descriptors all the time: one may be gone already
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def slurm_inodes():
    """Sockets slurmstepd holds: its PMIx server's listener leaks into the tasks; not ours to test."""
    held = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == "slurmstepd":
                held |= socket_inodes(pid)
        except OSError:
            continue
    return held


def start_ticks(pid):
    """When the process started, in clock ticks since boot."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[19])


my_start = start_ticks("self")


def listening():
    """This network namespace's listening TCP sockets, {inode: port}: `ss` asks the kernel for the
    listening ones only (netlink), where /proc/PID/net/tcp walks every socket of the machine, and
    a churning step leaves thousands in TIME_WAIT (a read took seconds, the step was over)."""
    found = {}
    for line in subprocess.run(["ss", "-Hltne"], capture_output=True, text=True).stdout.splitlines():
        fields = line.split()
        inode = next((f[4:] for f in fields if f.startswith("ino:")), None)
        if len(fields) > 3 and inode:
            found[inode] = int(fields[3].rsplit(":", 1)[1])
    return found


def target_ports():
    ports = set()
    slurm = slurm_inodes()
    listeners = listening()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.path.basename(os.readlink(f"/proc/{pid}/exe")) != target:
                continue
            if os.stat(f"/proc/{pid}/ns/net").st_ino != my_netns:
                continue
            # Only ranks started after this stranger (the step's start waits for it): a rank of an
            # earlier job may still be exiting, and once its port is gone the stranger would stop
            # before this job's ranks listen.
            if start_ticks(pid) < my_start:
                continue
            ports |= {listeners[inode] for inode in socket_inodes(pid) - slurm if inode in listeners}
        except OSError:
            continue
    return ports


def host_addresses():
    """Loopback first, then this node's other IPv4 addresses (a node's loopback may be down)."""
    found = ["127.0.0.1"]
    for line in subprocess.run(["ip", "-o", "-4", "addr", "show", "up"], capture_output=True, text=True).stdout.splitlines():
        address = line.split()[3].split("/")[0]
        if address not in found:
            found.append(address)
    return found


addresses = host_addresses()


def connect(port):
    for address in addresses:
        try:
            s = socket.create_connection((address, port), timeout=2)
            s.settimeout(2)
            return s
        except OSError:
            continue
    raise OSError(f"port {port} unreachable")


open_sockets, counts, seen, start = [], {"silent": 0, "garbage": 0, "header": 0, "forged": 0}, set(), time.time()
if ready_dir:
    open(os.path.join(ready_dir, f"ready.{socket.gethostname()}"), "w").close()
forged_rank = 0
while time.time() - start < 240:
    ports = target_ports()
    if not ports and (seen or time.time() - start > 60):
        break
    seen |= ports
    for port in ports:
        try:
            open_sockets.append(connect(port))
            counts["silent"] += 1
            s = connect(port)
            s.sendall(b"GET / HTTP/1.1\r\n\r\n" + os.urandom(200))
            open_sockets.append(s)
            counts["garbage"] += 1
            s = connect(port)
            s.sendall(struct.pack("=IIQIHHQ", 0x4A4B5433, 1, 1, 0, 65535, 65535, 1 << 62))
            open_sockets.append(s)
            counts["header"] += 1
            s = connect(port)
            open_sockets.append(s)
            s.settimeout(0.3)
            challenge = s.recv(24, socket.MSG_WAITALL)  # it comes when the rank accepts
            if len(challenge) != 24:
                continue
            version = struct.unpack_from("=I", challenge, 4)[0]  # the rank's protocol: a hello it reads
            key = b"2-0000000000000000#0"
            forged_rank = (forged_rank + 1) % world_size
            s.sendall(struct.pack("=IIIHH16s32s", 0x4A4B4848, version, forged_rank, len(key), 0, os.urandom(16),
                                  os.urandom(32)) + key)
            counts["forged"] += 1
        except OSError:
            pass
    while len(open_sockets) > 400:
        open_sockets.pop(0).close()
    time.sleep(0.2)
print(f"stranger on {socket.gethostname()}: {len(seen)} ports, connections: "
      + ", ".join(f"{k} {v}" for k, v in counts.items()), flush=True)
