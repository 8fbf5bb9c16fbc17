import sys

from .cli._info import main

sys.exit(main())
