"""The ``cacheless`` console script: the command line compiled into the native module
``cacheless._native``, the same code as the ``cacheless`` binary, so that ``pip install`` gives
both.

A package of its own beside ``cacheless``, which it does not import: it loads the native module
from that package's folder without running the package (numpy and the rest take ten times as
long to import as the command takes to start).
"""

import importlib.machinery
import importlib.util
import os
import shutil
import signal
import sys


def _native():
    """The compiled module ``cacheless._native``, loaded from the ``cacheless`` package's folder."""
    spec = importlib.util.find_spec("cacheless")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("cacheless: the cacheless package is not installed")
    here = spec.submodule_search_locations[0]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(here, "_native" + suffix)
        if os.path.exists(path):
            loader = importlib.machinery.ExtensionFileLoader("cacheless._native", path)
            spec = importlib.util.spec_from_loader("cacheless._native", loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            return module
    raise ImportError(f"cacheless: no native module beside {here}")


def main():
    """Runs ``sys.argv`` as the ``cacheless`` binary would, and exits with its status."""
    argv0 = sys.argv[0]
    # Python's SIGINT handler only sets a flag the interpreter looks at between bytecodes, which
    # it does not run while the command does: the signal gets its default action back (the
    # command installs its own where it cleans up first), as in the binary. Where it was
    # ignored when the interpreter started, it stays ignored, as the binary inherits it.
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        native = _native()
    except ValueError as e:
        # A misspelt CACHELESS_DISABLE switch, refused in the binary's words and status.
        as_cp = os.path.basename(argv0) == "cp"
        print(f"{'cp' if as_cp else 'error'}: {e}", file=sys.stderr)
        sys.exit(1 if as_cp else 2)
    # The program that runs this command line again: this script, as the shell found it.
    program = argv0 if os.sep in argv0 else (shutil.which(argv0) or argv0)
    sys.stdout.flush()
    sys.exit(native.cli_main(sys.argv, os.path.abspath(program)))


if __name__ == "__main__":
    main()
