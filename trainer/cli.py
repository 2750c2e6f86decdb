"""The command line: `python -m trainer (--config FILE | --config-json JSON) [--resume-from DIR]`.

Exit codes:

- 0: trained, graded and the adapter written; or stopped by SIGUSR1 after a checkpoint.
- 1: an unexpected error (a traceback is on stderr).
- 2: unusable input: a bad config or command line, a dataset row that does not fit its
  format, a model that cannot be loaded. One line on stderr says what.
- 3: grading failed: the loss became NaN or the held-out loss got worse.
- 143: stopped by SIGTERM (after a checkpoint when the step ended within a second).

`--resume-from` wins over `$TRAINYARD_RESUME_FROM`; either may name a checkpoint directory or
a directory of `checkpoint-N` directories (the latest complete one is used).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from runner.protocol import ENV_RESUME_FROM
from trainer.config import ConfigError, load_config
from trainer.events import fail, say
from trainer.formats import DataError
from trainer.hub import choose_hub

INPUT_ERROR_EXIT_CODE = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer", description="Fine-tune a causal language model with LoRA."
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", metavar="FILE", help="a JSON config file")
    source.add_argument("--config-json", metavar="JSON", help="the JSON config itself")
    parser.add_argument(
        "--resume-from",
        metavar="DIR",
        help=f"a checkpoint to resume from (default: ${ENV_RESUME_FROM})",
    )
    args = parser.parse_args(argv)  # exits 2 on a bad command line

    from trainer.train import ModelError, run

    try:
        config = load_config(path=args.config, json_text=args.config_json)
        chosen = choose_hub(config.model)
        if chosen:
            say(chosen)
        resume_from = args.resume_from or os.environ.get(ENV_RESUME_FROM, "")
        return run(config, resume_from=resume_from)
    except (ConfigError, DataError, ModelError) as error:
        fail(str(error))
        return INPUT_ERROR_EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
