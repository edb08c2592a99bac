"""`--sys k8s`: the same train.py command, on a Kubernetes cluster. The settings are resolved here first (a bad set
name or override fails on the laptop, not in a pod), then the k8s/ manifests are rendered from the command line
(rl/cloud/render.py) and either printed (`--dry_run True`, for `kubectl apply -f -`) or created with the
`kubernetes` client (rl/cloud/submit.py).
"""

from __future__ import annotations

import sys
from pathlib import Path


def submit_run(args, argv: list[str]) -> None:
    from rl.cloud.render import plan, render, to_yaml
    from rl.resolve import resolve_hparams

    hp = resolve_hparams(args, Path(args.output_dir))
    if getattr(args, "tune", None) is not None:  # a bad search fails here, not in its pods
        from rl.tune.settings import check_flags, check_space

        check_flags(args)
        check_space(args, hp)
    p = plan(args, argv, hp)
    docs = render(p)
    if args.dry_run:
        sys.stdout.write(to_yaml(docs))
        return
    from rl.cloud.submit import follow_commands, submit

    namespace = submit(docs, p.namespace)
    print(f"submitted {p.kind} {p.name} to namespace {namespace}: {' '.join(['train.py', *p.train_args])}\n"
          f"run folder: {p.output_dir} on the volume claim {docs[0]['metadata']['name']}")
    for line in follow_commands(p.kind, p.name, namespace, p.output_dir):
        print(f"  {line}")
