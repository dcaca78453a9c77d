"""python -m autograde release [ASSIGNMENT ...]"""
import argparse
import sys

from autograde.release import release


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograde", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("release", help="regenerate notebooks/ from solutions/ (all assignments by default)")
    rel.add_argument("assignments", nargs="*")
    args = parser.parse_args(argv)
    if args.command == "release":
        for name in release(args.assignments):
            print(f"released {name} -> notebooks/{name}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
