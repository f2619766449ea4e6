from kube_gpu_exporter.exporter.cli import main

raise SystemExit(main())
