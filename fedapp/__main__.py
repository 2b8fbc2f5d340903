import sys

from fedapp.cli import main

sys.exit(main())
