"""KV transfer throughput of prefill-decode disaggregation's tcp backend, between two processes.

A child process plays the prefill server: a `TcpOutbox` on loopback publishing one room per
prompt, each carrying the KV of SmolLM2-135M in fp32 for that many prompt tokens (30 layers x 2 x
3 heads x 64 x 4 bytes = 45 KiB a token, the size the layout declares). This process plays the
decode server: it fetches each room as a decode server does (`tcp_transfer.fetch`) and times it.
Two setups in one run: the backend's fetch and, as the floor, a bare socket moving the same bytes
with one `sendall` / `recv_into`; reported: MB/s of each and their ratio, per prompt size.

    .venv/bin/python benchmarks/bench_pd_transfer.py [--tokens 128 1024 4096] [--rounds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import time

from sglang.runtime.disaggregation import tcp_transfer
from sglang.runtime.disaggregation.messages import KVHeader

KV_BYTES_PER_TOKEN = 30 * 2 * 3 * 64 * 4


def prefill_process(sizes: list[int], rounds: int, ports: mp.Queue) -> None:
    outbox = tcp_transfer.TcpOutbox("127.0.0.1", expire_s=600)
    bare = socket.create_server(("127.0.0.1", 0))
    ports.put((outbox.port, bare.getsockname()[1]))
    room = 0
    for size in sizes:
        payload = os.urandom(size)
        for _ in range(rounds):
            header = KVHeader(room=room, ok=True, first_token=1, dtype="uint8", shape=[size], payload_bytes=size)
            outbox.publish(header, payload)
            room += 1
            conn, _ = bare.accept()
            with conn:
                conn.sendall(payload)
    time.sleep(1)  # let the last fetch finish before the process ends


def bare_fetch(port: int, size: int) -> None:
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    with socket.create_connection(("127.0.0.1", port)) as sock:
        while got < size:
            got += sock.recv_into(view[got:], size - got)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[128, 1024, 4096])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = [t * KV_BYTES_PER_TOKEN for t in args.tokens]
    print(f"load average {os.getloadavg()[0]:.1f}; loopback, two processes; best of {args.rounds}")
    ports: mp.Queue = mp.get_context("spawn").Queue()
    child = mp.get_context("spawn").Process(target=prefill_process, args=(sizes, args.rounds, ports))
    child.start()
    outbox_port, bare_port = ports.get(timeout=60)
    room = 0
    print("| prompt tokens | KV MiB | tcp backend MB/s | bare socket MB/s | ratio |")
    print("|---|---|---|---|---|")
    for tokens, size in zip(args.tokens, sizes):
        backend, floor = [], []
        for _ in range(args.rounds):
            started = time.perf_counter()
            header, payload = tcp_transfer.fetch("127.0.0.1", outbox_port, room, 60, lambda s: None)
            backend.append(time.perf_counter() - started)
            assert len(payload) == size == header.payload_bytes
            room += 1
            started = time.perf_counter()
            bare_fetch(bare_port, size)
            floor.append(time.perf_counter() - started)
        ours, bare = size / min(backend) / 1e6, size / min(floor) / 1e6
        print(f"| {tokens} | {size / 2**20:.1f} | {ours:.0f} | {bare:.0f} | {ours / bare:.2f} |")
    child.join(30)


if __name__ == "__main__":
    main()
