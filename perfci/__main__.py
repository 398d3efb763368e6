import sys

from perfci.cli import main

sys.exit(main())
