"""`python -m pipeline ...` is the same as the `mathrl` command."""

from pipeline.cli import main

raise SystemExit(main())
