import sys

from ._info import main

sys.exit(main())
