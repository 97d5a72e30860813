import sys

from moeplan.cli import main

sys.exit(main())
