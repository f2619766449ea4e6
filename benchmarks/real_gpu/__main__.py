"""`python -m benchmarks.real_gpu`: see benchmarks/real_gpu/run.py."""

from benchmarks.real_gpu.run import main

raise SystemExit(main())
