from brrm.cli import main

raise SystemExit(main())
