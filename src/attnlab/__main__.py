"""``python -m attnlab ...`` is the ``attnlab`` command (also under ``torchrun -m attnlab``)."""

import sys

from .cli import main

sys.exit(main())
