"""`python -m autograd_device_logging`: the launcher (launcher.py)."""

import sys

from autograd_device_logging.launcher import main

sys.exit(main(sys.argv[1:], end_process=True))
