"""The three-domain training corpus of the course's draft/target pair.

Everything is built on the spot from what ships with Python, so nothing is downloaded:
  code   the standard library's own .py files (``sysconfig.get_paths()["stdlib"]``)
  prose  the English reference text in ``pydoc_data.topics.topics``
  json   structured records generated here from a seed
Each document has a stable name; a hash of the name decides whether it is held out,
so the split does not move when a document is added or removed.
"""

from __future__ import annotations

import json
import random
import sys
import sysconfig
import zlib
from pathlib import Path

from specdec.core.models import DOMAINS  # noqa: F401  (the domains are the held-out texts')

# percent of documents held out per domain (code has ~1,700 files, prose ~250 chunks)
HELDOUT_PERCENT = {"code": 3, "prose": 10, "json": 10}

# stdlib folders that are not ordinary library code (tests, vendored tools, installed packages)
_SKIP_DIRS = {"site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__", "ensurepip"}


def corpus_versions() -> dict:
    """What the corpus was built from, for the model card."""
    return {"python": sys.version.split()[0], "stdlib": portable_path(sysconfig.get_paths()["stdlib"])}


def portable_path(path: str) -> str:
    """`path` without this machine's install location: relative to the interpreter's sys.base_prefix
    (written `<sys.base_prefix>/...`), else only its last two parts."""
    if path.startswith("<") or path.startswith(".../"):
        return path  # already portable
    try:
        return "<sys.base_prefix>/" + Path(path).resolve().relative_to(Path(sys.base_prefix).resolve()).as_posix()
    except ValueError:
        return ".../" + "/".join(Path(path).parts[-2:])


def code_documents() -> list[tuple[str, str]]:
    """(relative path, source) for every stdlib .py file outside tests and vendored tools."""
    root = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if _SKIP_DIRS.intersection(rel.parts[:-1]):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            docs.append((rel.as_posix(), text))
    return docs


def _chunks(text: str, size: int) -> list[str]:
    """split at blank lines into pieces of about `size` characters."""
    pieces, current = [], ""
    for para in text.split("\n\n"):
        current = f"{current}\n\n{para}" if current else para
        if len(current) >= size:
            pieces.append(current)
            current = ""
    if current:
        pieces.append(current)
    return pieces


def prose_documents(chunk_chars: int = 2000) -> list[tuple[str, str]]:
    """(topic#i, text) chunks of the pydoc reference topics."""
    from pydoc_data.topics import topics

    return [
        (f"{name}#{i}", piece) for name in sorted(topics) for i, piece in enumerate(_chunks(topics[name], chunk_chars))
    ]


_FIRST = [
    "Ada",
    "Alan",
    "Barbara",
    "Claude",
    "Donald",
    "Edsger",
    "Frances",
    "Grace",
    "Guido",
    "John",
    "Ken",
    "Leslie",
    "Margaret",
    "Niklaus",
    "Radia",
    "Tim",
]
_LAST = [
    "Lovelace",
    "Turing",
    "Liskov",
    "Shannon",
    "Knuth",
    "Dijkstra",
    "Allen",
    "Hopper",
    "van Rossum",
    "McCarthy",
    "Thompson",
    "Lamport",
    "Hamilton",
    "Wirth",
    "Perlman",
    "Peters",
]
_CITIES = ["Berlin", "Lagos", "Lima", "Mumbai", "Osaka", "Oslo", "Paris", "Quito", "Seoul", "Toronto"]
_PRODUCTS = ["keyboard", "monitor", "cable", "laptop", "mouse", "headset", "dock", "webcam", "charger"]
_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]
_SERVICES = ["auth", "billing", "search", "gateway", "scheduler", "storage"]
_MESSAGES = [
    "request served",
    "cache miss",
    "retrying connection",
    "token expired",
    "disk usage high",
    "job finished",
    "user logged in",
    "timeout waiting for lock",
]
_STATUSES = ["pending", "paid", "shipped", "delivered", "cancelled"]


def _date(rng: random.Random) -> str:
    return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def _timestamp(rng: random.Random) -> str:
    return f"{_date(rng)}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"


def _user(rng: random.Random) -> dict:
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    return {
        "id": rng.randint(1, 99999),
        "name": f"{first} {last}",
        "email": f"{first.lower()}.{last.lower().replace(' ', '')}@example.com",
        "age": rng.randint(18, 90),
        "active": rng.random() < 0.7,
        "city": rng.choice(_CITIES),
        "signup_date": _date(rng),
        "tags": rng.sample(["admin", "beta", "premium", "staff", "trial"], rng.randint(0, 3)),
    }


def _order(rng: random.Random) -> dict:
    items = [
        {
            "sku": f"SKU-{rng.randint(1000, 9999)}",
            "product": rng.choice(_PRODUCTS),
            "quantity": rng.randint(1, 5),
            "unit_price": round(rng.uniform(2, 500), 2),
        }
        for _ in range(rng.randint(1, 4))
    ]
    return {
        "order_id": f"ORD-{rng.randint(100000, 999999)}",
        "customer_id": rng.randint(1, 99999),
        "status": rng.choice(_STATUSES),
        "created_at": _timestamp(rng),
        "items": items,
        "total": round(sum(i["quantity"] * i["unit_price"] for i in items), 2),
        "currency": rng.choice(["EUR", "USD", "JPY"]),
    }


def _log_event(rng: random.Random) -> dict:
    return {
        "timestamp": _timestamp(rng),
        "level": rng.choice(_LEVELS),
        "service": rng.choice(_SERVICES),
        "message": rng.choice(_MESSAGES),
        "latency_ms": rng.randint(1, 2000),
        "request_id": f"{rng.getrandbits(32):08x}",
    }


def _sensor(rng: random.Random) -> dict:
    return {
        "sensor_id": f"sensor-{rng.randint(1, 64):03d}",
        "location": {
            "city": rng.choice(_CITIES),
            "lat": round(rng.uniform(-60, 60), 4),
            "lon": round(rng.uniform(-180, 180), 4),
        },
        "readings": [
            {"time": _timestamp(rng), "temperature_c": round(rng.uniform(-10, 40), 1), "humidity": rng.randint(10, 100)}
            for _ in range(rng.randint(1, 3))
        ],
        "battery": round(rng.random(), 2),
    }


_RECORD_KINDS = (_user, _order, _log_event, _sensor)


def json_documents(n: int = 8000, seed: int = 0) -> list[tuple[str, str]]:
    """(record-i, pretty-printed JSON) for n seeded records of four kinds."""
    rng = random.Random(seed)
    return [(f"record-{i}", json.dumps(rng.choice(_RECORD_KINDS)(rng), indent=2)) for i in range(n)]


def is_heldout(domain: str, name: str) -> bool:
    """stable split: the document's name, not its position, decides."""
    return zlib.crc32(f"{domain}/{name}".encode()) % 100 < HELDOUT_PERCENT[domain]


def load_corpus(
    seed: int = 0, max_chars: int | None = None, json_records: int = 8000
) -> dict[str, dict[str, list[str]]]:
    """{domain: {"train": [text, ...], "heldout": [text, ...]}}.

    max_chars caps each domain's text (for smoke runs): documents are taken in their
    stable order until the cap is reached and both splits hold at least one.
    """
    sources = {"code": code_documents(), "prose": prose_documents(), "json": json_documents(json_records, seed)}
    corpus = {}
    for domain, docs in sources.items():
        split = {"train": [], "heldout": []}
        total = 0
        for name, text in docs:
            if max_chars is not None and total >= max_chars and all(split.values()):
                break
            split["heldout" if is_heldout(domain, name) else "train"].append(text)
            total += len(text)
        corpus[domain] = split
    return corpus
