"""`python -m kit`: the `kit` command, for an environment whose scripts are not on PATH."""

from kit.cli import main

if __name__ == "__main__":
    main()
