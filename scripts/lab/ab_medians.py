#!/usr/bin/env python3
"""The summary line of an A/B of whole-model benches (pass_ab.sh, switch_ab.sh): each side's best
median over the rounds' `fusec bench --json` files ZOO/MODEL.SIDE.ROUND.json, their ratio (A / B),
and every round's median.
    python3 scripts/lab/ab_medians.py ZOO MODEL ROUNDS SIDE_A SIDE_B"""
import json
import sys


def medians(zoo: str, model: str, side: str, rounds: int) -> list:
    ms = []
    for r in range(1, rounds + 1):
        try:
            with open(f"{zoo}/{model}.{side}.{r}.json") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue  # that bench failed; the script that ran it said so
        # the first variant's median (bench --no-compare runs the file as given)
        v = doc["variants"][0] if "variants" in doc else doc
        ms.append(v["latency_ms"]["median"] if "latency_ms" in v else v["median_ms"])
    return ms


def main() -> int:
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    zoo, model, rounds, side_a, side_b = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    a, b = medians(zoo, model, side_a, rounds), medians(zoo, model, side_b, rounds)
    best_a, best_b = min(a, default=float("nan")), min(b, default=float("nan"))
    each = " ".join(f"{x:.4f}" for x in a) + " | " + " ".join(f"{x:.4f}" for x in b)
    print(f"{model:22s} {best_a:12.4f} {best_b:12.4f} {best_a / best_b:8.3f}   rounds: {each}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
