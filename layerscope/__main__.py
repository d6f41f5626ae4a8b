import sys

from layerscope.cli.main import main

sys.exit(main())
