"""The `circlerope` command of an installed package (the entry point pyproject.toml names): runs
the C++ command shipped inside the package (circlerope/_bin/circlerope) with the same
arguments, standard streams and exit status. A top-level module, not circlerope._cli, so that
starting the command imports neither the package nor torch."""
import os
import sys


def executable() -> str:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "circlerope", "_bin", "circlerope")
    if not os.access(path, os.X_OK):
        raise SystemExit(f"circlerope: the command is not in this installation ({path} is missing); it is built "
                         "when nlohmann-json and CLI11 are found (Debian: nlohmann-json3-dev libcli11-dev)")
    return path


def main() -> None:
    path = executable()
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
