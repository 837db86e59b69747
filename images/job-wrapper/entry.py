"""The entry of the frozen wrapper: ``flow-runner job`` as one self-contained program.

PyInstaller (images/job-wrapper/build.sh) freezes this file with the interpreter and every
module ``job`` imports, so a pod's component image needs neither Python nor flow-runner:
``/flow/wrapper/flow-runner-job [OPTIONS] -- COMMAND`` is ``flow-runner job [OPTIONS] --
COMMAND``. The imports below are what the analysis follows: the CLI imports a command's
module, and the registry a backend's, by name only when asked for, which a freezer cannot
see.

The component inherits the wrapper's environment, so what the bootloader added to it is
taken out first: its ``LD_LIBRARY_PATH`` (the bundle's directory, which would make the
component's own programs load the bundle's libssl, libz or libpython) goes back to what
the pod set, and its ``_PYI_*`` variables go. The loader read ``LD_LIBRARY_PATH`` when
the wrapper started, so the wrapper keeps finding its libraries.
"""

import gc
import os
import sys

from runner.cli import job  # noqa: F401 (registers the command)
from runner.cli.app import main
from runner.sandbox import process  # noqa: F401 (the backend job opens by name)

original = os.environ.pop("LD_LIBRARY_PATH_ORIG", None)
if original is None:
    os.environ.pop("LD_LIBRARY_PATH", None)
else:
    os.environ["LD_LIBRARY_PATH"] = original
for name in [name for name in os.environ if name.startswith("_PYI_")]:
    del os.environ[name]
gc.disable()  # as the console script does (runner/launch.py): on again before the run
sys.argv[1:1] = ["job"]
main()
