"""The `specpilot` command line: generate, validate, plan and render SpeculativeDeployments, run the operator."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from specpilot.api import crd
from specpilot.evaluate import add_evaluate_command


def _cmd_crd(args: argparse.Namespace) -> int:
    text = crd.render_api_docs() if args.docs else crd.render_crd_yaml()
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specpilot", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p_crd = sub.add_parser("crd", help="print the generated CustomResourceDefinition (or --docs: the API reference)")
    p_crd.add_argument("--docs", action="store_true", help="print docs/api.md instead of the CRD")
    p_crd.add_argument("-o", "--output", help="write to this file instead of stdout")
    p_crd.set_defaults(func=_cmd_crd)

    add_evaluate_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code
