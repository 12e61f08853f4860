"""The slot a delivery belongs to in an intake tier (docs/scale-out.md).

A tier splits intake across 2^k slot databases. A delivery's route key
comes from what its signature covers (webhook_route_key computes it; the
proxy does so for every delivery); its slot is the first four bytes of
SHA-256(provider, newline, route key) as a big-endian integer, masked to
the number of slots. The same function in SQL is webhook_route_slot, and
PL/Proxy's RUN ON applies the same mask.

    python tier.py 8 < keys.tsv     (lines: provider TAB route_key; prints slots)
"""
import hashlib
import sys


def route_hash(provider: str, route_key: str) -> int:
    digest = hashlib.sha256(f"{provider}\n{route_key}".encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


def route_slot(provider: str, route_key: str, slots: int) -> int:
    if slots < 1 or slots & (slots - 1):
        raise ValueError("slots must be a power of two")
    return route_hash(provider, route_key) & (slots - 1)


def slot_of_id(lease_or_delivery_id: str) -> int:
    """The slot a delivery or lease id made in a slot's database carries."""
    return int(lease_or_delivery_id.replace("-", "")[-4:], 16)


if __name__ == "__main__":
    slots = int(sys.argv[1])
    for line in sys.stdin:
        provider, key = line.rstrip("\n").split("\t", 1)
        print(route_slot(provider, key, slots))
