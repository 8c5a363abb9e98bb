"""`python -m repro.launch.wait_ray --address HOST:PORT --resource GPU --count 16`: block until a Ray
cluster offers that much of a resource, so a multi-node job starts verl only once every node has joined
(verl sizes its worker groups from what it sees at start)."""

from __future__ import annotations

import argparse
import sys
import time


def wait_for(address: str, resource: str, count: float, timeout: float, poll: float = 2.0) -> float:
    """The amount of `resource` seen once it reaches `count`; TimeoutError after `timeout` seconds."""
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        deadline = time.monotonic() + timeout
        while True:
            seen = float(ray.cluster_resources().get(resource, 0))
            if seen >= count:
                return seen
            if time.monotonic() > deadline:
                raise TimeoutError(f"Ray at {address} offers {seen:g} {resource} after {timeout:.0f}s; need {count:g}")
            time.sleep(poll)
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repro.launch.wait_ray", description=__doc__)
    parser.add_argument("--address", required=True, help="the head's HOST:PORT")
    parser.add_argument("--resource", default="GPU")
    parser.add_argument("--count", type=float, required=True)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)
    try:
        seen = wait_for(args.address, args.resource, args.count, args.timeout)
    except TimeoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"Ray at {args.address}: {seen:g} {args.resource} ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
