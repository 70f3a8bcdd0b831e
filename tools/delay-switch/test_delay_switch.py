#!/usr/bin/python3
"""Test of jk-delay-switch: two network namespaces whose eth0 are taps of one switch.

With a delay D, every UDP round trip between them must take at least 2 D and, at the median,
less than 2 D + SLACK; a burst of numbered datagrams must come back complete and in order; and a
TCP stream must be echoed intact. The same is checked with delay 0, where the median round trip
must be under D (so that the delay measured is the switch's). Last, with D and a queue of 16
frames, the burst must lose datagrams, keep the rest in order, and the switch must count drops. Needs root, `ip` and /dev/net/tun;
exits 77 (meson's SKIP) with a SKIP line where a namespace or a tap cannot be made.

Usage: test_delay_switch.py SWITCH_BINARY [DELAY_MS]   (python3 standard library only)
"""
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time

SLACK_MS = 10.0
ROUNDS = 60
BURST = 300
TCP_BYTES = 1 << 20
PORT = 5077


def ip(*args, check=True):
    return subprocess.run(['ip', *args], check=check, capture_output=True, text=True)


def skip(why):
    print(f'SKIP: {why}')
    sys.exit(77)


def server():
    """Runs in namespace A: echoes UDP datagrams and one TCP connection's stream, then exits."""
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(('0.0.0.0', PORT))
    t = socket.socket()
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind(('0.0.0.0', PORT))
    t.listen(1)
    print('ready', flush=True)
    u.settimeout(30)
    while True:
        data, peer = u.recvfrom(2048)
        if data == b'end':
            return
        if data == b'tcp':
            break
        u.sendto(data, peer)
    conn, _ = t.accept()
    while chunk := conn.recv(65536):
        conn.sendall(chunk)
    conn.close()


def client(peer, tcp):
    """Runs in namespace B; prints 'rtts ...' (ms), then 'burst ok|...' and, if tcp, 'tcp ok|...'."""
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(5)
    rtts = []
    for i in range(ROUNDS):
        msg = b'ping %d' % i
        t0 = time.monotonic()
        u.sendto(msg, (peer, PORT))
        while u.recv(2048) != msg:
            pass
        rtts.append((time.monotonic() - t0) * 1e3)
    print('rtts ' + ' '.join(f'{r:.3f}' for r in rtts))
    for i in range(BURST):
        u.sendto(b'seq %d' % i, (peer, PORT))
    got = []
    try:
        while len(got) < BURST:
            data = u.recv(2048)
            if data.startswith(b'seq '):
                got.append(int(data[4:]))
    except socket.timeout:
        pass
    print('burst ' + ('ok' if got == list(range(BURST)) else f'received {len(got)} of {BURST}, '
                      f'in order: {got == sorted(got) and len(set(got)) == len(got)}'))
    if not tcp:
        u.sendto(b'end', (peer, PORT))
        return
    u.sendto(b'tcp', (peer, PORT))
    payload = bytes((i * 7 + i // 251) & 0xff for i in range(TCP_BYTES))
    t = socket.create_connection((peer, PORT), timeout=30)
    t.sendall(payload)
    t.shutdown(socket.SHUT_WR)
    back = bytearray()
    while chunk := t.recv(65536):
        back += chunk
    print('tcp ' + ('ok' if bytes(back) == payload else f'echo differs ({len(back)} bytes back)'))


def run(switch, delay_ms, queue=8192, tcp=True):
    """Sets up two namespaces over the switch; returns round trips (ms), the burst and tcp lines
    and the switch's count of dropped frames."""
    tag = f'jkds{os.getpid() % 100000}'
    ns = [f'{tag}-a', f'{tag}-b']
    pid_file = f'/run/{tag}.pid'
    proc = None
    try:
        for n in ns:
            ip('netns', 'add', n)
        try:
            os.unlink(pid_file)
        except FileNotFoundError:
            pass
        proc = subprocess.Popen([switch, '--delay-us', str(int(delay_ms * 1000)), '--queue-frames', str(queue),
                                 '--pid-file', pid_file, *ns], stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 10
        while not os.path.exists(pid_file):
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f'FAIL: the switch did not start: {proc.stderr.read() if proc.poll() is not None else ""}')
            time.sleep(0.02)
        for i, n in enumerate(ns):
            ip('link', 'set', n, 'netns', n, 'name', 'eth0')
            ip('-n', n, 'link', 'set', 'lo', 'up')
            ip('-n', n, 'link', 'set', 'eth0', 'addrgenmode', 'none')
            ip('-n', n, 'addr', 'add', f'198.19.254.{i + 1}/24', 'dev', 'eth0')
            ip('-n', n, 'link', 'set', 'eth0', 'up')
        me = os.path.abspath(__file__)
        srv = subprocess.Popen(['ip', 'netns', 'exec', ns[0], sys.executable, me, '--server'],
                               stdout=subprocess.PIPE, text=True)
        if srv.stdout.readline().strip() != 'ready':
            sys.exit('FAIL: the echo server did not start')
        out = subprocess.run(['ip', 'netns', 'exec', ns[1], sys.executable, me, '--client', '198.19.254.1',
                              *([] if tcp else ['notcp'])], capture_output=True, text=True, timeout=120)
        srv.wait(timeout=30)
        if out.returncode != 0:
            sys.exit(f'FAIL: client: {out.stderr.strip()}')
        lines = dict(line.split(' ', 1) for line in out.stdout.splitlines())
    finally:
        err = ''
        if proc is not None:
            proc.terminate()
            _, err = proc.communicate(timeout=10)
            print(f'  {err.strip()}')
        for n in ns:
            ip('netns', 'del', n, check=False)
    dropped = re.search(r'dropped (\d+)', err)
    if not dropped:
        sys.exit(f'FAIL: the switch printed no counters: {err.strip()}')
    return [float(x) for x in lines['rtts'].split()], lines['burst'], lines.get('tcp'), int(dropped.group(1))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == '--server':
        return server()
    if len(sys.argv) >= 3 and sys.argv[1] == '--client':
        return client(sys.argv[2], sys.argv[3:] != ['notcp'])
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    switch = os.path.abspath(sys.argv[1])
    delay = float(sys.argv[2]) if len(sys.argv) == 3 else 10.0
    if os.geteuid() != 0:
        skip('needs root (network namespaces, tap devices)')
    if shutil.which('ip') is None:
        skip('no ip program (iproute2)')
    if not os.path.exists('/dev/net/tun'):
        skip('no /dev/net/tun')
    probe = f'jkds{os.getpid() % 100000}-p'
    if ip('netns', 'add', probe, check=False).returncode != 0:
        skip('cannot make a network namespace (ip netns add)')
    ip('netns', 'del', probe, check=False)

    failures = []
    for d in (0.0, delay):
        rtts, burst, tcp, _ = run(switch, d)
        med = statistics.median(rtts)
        print(f'delay {d} ms: round trip min {min(rtts):.3f} median {med:.3f} max {max(rtts):.3f} ms '
              f'({len(rtts)} rounds); burst of {BURST}: {burst}; tcp {TCP_BYTES} bytes: {tcp}')
        if burst != 'ok':
            failures.append(f'delay {d}: burst {burst}')
        if tcp != 'ok':
            failures.append(f'delay {d}: tcp {tcp}')
        if d == 0 and med >= delay:
            failures.append(f'delay 0: median round trip {med:.3f} ms, not under {delay} ms')
        if d > 0 and min(rtts) < 2 * d:
            failures.append(f'delay {d}: a round trip of {min(rtts):.3f} ms is under 2 x delay')
        if d > 0 and med >= 2 * d + SLACK_MS:
            failures.append(f'delay {d}: median round trip {med:.3f} ms, not under 2 x delay + {SLACK_MS} ms')
    rtts, burst, _, dropped = run(switch, delay, queue=16, tcp=False)
    print(f'delay {delay} ms, queue of 16 frames: burst of {BURST}: {burst}; switch dropped {dropped}')
    if not burst.endswith('in order: True') or dropped == 0:
        failures.append(f'queue of 16: burst {burst}, {dropped} dropped (expected a loss, in order, counted)')
    for f in failures:
        print(f'FAIL: {f}')
    sys.exit(1 if failures else 0)


if __name__ == '__main__':
    main()
