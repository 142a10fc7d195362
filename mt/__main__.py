import sys

from mt.cli import main

sys.exit(main())
