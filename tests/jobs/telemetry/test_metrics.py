"""parse_metric_line: pure, so none of these tests touches the database."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apps.jobs.telemetry import metrics
from apps.jobs.telemetry.metrics import MAX_LINE_CHARS, ParsedMetric, parse_metric_line

# Hugging Face Trainer (`print(logs)` / ProgressCallback)


def test_it_reads_a_hugging_face_training_line():
    line = (
        "{'loss': 2.3145, 'grad_norm': 1.2034817934036255, 'learning_rate': 0.0002, 'epoch': 0.25}"
    )

    assert parse_metric_line(line) == ParsedMetric(
        step=None,
        loss=2.3145,
        epoch=0.25,
        learning_rate=0.0002,
        extra={"grad_norm": 1.2034817934036255},
    )


def test_it_takes_the_step_from_a_hugging_face_line_that_has_one():
    line = "{'loss': 2.31, 'grad_norm': 1.2, 'learning_rate': 0.0002, 'epoch': 0.25, 'step': 1}"

    assert parse_metric_line(line) == ParsedMetric(
        step=1, loss=2.31, epoch=0.25, learning_rate=0.0002, extra={"grad_norm": 1.2}
    )


def test_it_keeps_every_other_numeric_field_of_a_trl_line_in_extra():
    line = (
        "{'loss': 1.8123, 'grad_norm': 0.9051, 'learning_rate': 1.9e-05, 'num_tokens': 40960.0, "
        "'mean_token_accuracy': 0.6102, 'epoch': 0.1}"
    )

    assert parse_metric_line(line) == ParsedMetric(
        step=None,
        loss=1.8123,
        epoch=0.1,
        learning_rate=1.9e-05,
        extra={"grad_norm": 0.9051, "num_tokens": 40960.0, "mean_token_accuracy": 0.6102},
    )


def test_it_reads_a_hugging_face_eval_line_with_eval_loss_in_extra():
    line = (
        "{'eval_loss': 2.1034, 'eval_runtime': 0.5123, 'eval_samples_per_second': 195.2, "
        "'eval_steps_per_second': 25.37, 'epoch': 1.0}"
    )

    assert parse_metric_line(line) == ParsedMetric(
        step=None,
        loss=None,
        epoch=1.0,
        learning_rate=None,
        extra={
            "eval_loss": 2.1034,
            "eval_runtime": 0.5123,
            "eval_samples_per_second": 195.2,
            "eval_steps_per_second": 25.37,
        },
    )


def test_it_reads_the_final_summary_with_train_loss_in_extra_and_no_loss():
    line = (
        "{'train_runtime': 12.3456, 'train_samples_per_second': 32.4, "
        "'train_steps_per_second': 4.05, 'train_loss': 2.0312, 'epoch': 1.0}"
    )

    assert parse_metric_line(line) == ParsedMetric(
        step=None,
        loss=None,
        epoch=1.0,
        learning_rate=None,
        extra={
            "train_runtime": 12.3456,
            "train_samples_per_second": 32.4,
            "train_steps_per_second": 4.05,
            "train_loss": 2.0312,
        },
    )


def test_it_keeps_a_nan_loss_and_drops_nan_from_extra():
    parsed = parse_metric_line(
        "{'loss': nan, 'grad_norm': nan, 'learning_rate': 0.0002, 'epoch': 0.5}"
    )

    assert parsed is not None
    assert math.isnan(parsed.loss)
    assert (parsed.step, parsed.epoch, parsed.learning_rate, parsed.extra) == (
        None,
        0.5,
        0.0002,
        {},
    )


def test_it_drops_infinite_values_from_extra_but_keeps_the_rest():
    line = "{'loss': 3.2, 'grad_norm': inf, 'scale': -inf, 'learning_rate': 0.0001, 'epoch': 0.3}"

    assert parse_metric_line(line) == ParsedMetric(
        step=None, loss=3.2, epoch=0.3, learning_rate=0.0001, extra={}
    )


def test_it_keeps_an_infinite_loss():
    parsed = parse_metric_line("{'loss': inf, 'epoch': 0.3}")

    assert parsed is not None
    assert parsed.loss == math.inf


def test_it_ignores_strings_none_and_nested_values_in_a_hugging_face_line():
    line = "{'loss': 2.0, 'note': 'warmup', 'eval_accuracy': None, 'per_class': [0.1, 0.2]}"

    assert parse_metric_line(line) == ParsedMetric(
        step=None, loss=2.0, epoch=None, learning_rate=None, extra={}
    )


def test_it_returns_a_float_loss_for_an_integer_loss():
    parsed = parse_metric_line("{'loss': 2, 'epoch': 1}")

    assert parsed == ParsedMetric(step=None, loss=2.0, epoch=1.0, learning_rate=None, extra={})
    assert type(parsed.loss) is float
    assert type(parsed.epoch) is float


# nanoGPT


def test_it_reads_a_nanogpt_iteration_line_with_mfu():
    assert parse_metric_line("iter 100: loss 2.4712, time 380.12ms, mfu 12.34%") == ParsedMetric(
        step=100,
        loss=2.4712,
        epoch=None,
        learning_rate=None,
        extra={"time_ms": 380.12, "mfu_pct": 12.34},
    )


def test_it_reads_an_older_nanogpt_iteration_line_without_mfu():
    assert parse_metric_line("iter 10: loss 3.1000, time 381.50ms") == ParsedMetric(
        step=10, loss=3.1, epoch=None, learning_rate=None, extra={"time_ms": 381.5}
    )


def test_it_drops_nanogpts_placeholder_mfu_of_the_first_iterations():
    assert parse_metric_line("iter 0: loss 4.2874, time 35227.04ms, mfu -100.00%") == (
        ParsedMetric(
            step=0, loss=4.2874, epoch=None, learning_rate=None, extra={"time_ms": 35227.04}
        )
    )


def test_it_reads_a_nanogpt_eval_line_as_train_loss_and_val_loss_never_loss():
    assert parse_metric_line("step 2000: train loss 1.7648, val loss 1.8857") == ParsedMetric(
        step=2000,
        loss=None,
        epoch=None,
        learning_rate=None,
        extra={"train_loss": 1.7648, "val_loss": 1.8857},
    )


def test_it_drops_a_non_finite_nanogpt_eval_value_but_keeps_the_other():
    assert parse_metric_line("step 40: train loss nan, val loss 2.5000") == ParsedMetric(
        step=40, loss=None, epoch=None, learning_rate=None, extra={"val_loss": 2.5}
    )


def test_it_keeps_a_nan_loss_from_nanogpt():
    parsed = parse_metric_line("iter 250: loss nan, time 101.00ms, mfu 30.00%")

    assert parsed is not None
    assert math.isnan(parsed.loss)
    assert (parsed.step, parsed.extra) == (250, {"time_ms": 101.0, "mfu_pct": 30.0})


def test_it_tolerates_fields_a_nanogpt_fork_appends_after_a_comma():
    assert parse_metric_line("iter 7: loss 2.5000, time 10.00ms, mfu 5.00%, lr 6.0e-04") == (
        ParsedMetric(
            step=7,
            loss=2.5,
            epoch=None,
            learning_rate=None,
            extra={"time_ms": 10.0, "mfu_pct": 5.0},
        )
    )


def test_it_accepts_surrounding_whitespace_on_a_nanogpt_line():
    assert parse_metric_line("   iter 5: loss 2.0000, time 1.00ms\r\n") == ParsedMetric(
        step=5, loss=2.0, epoch=None, learning_rate=None, extra={"time_ms": 1.0}
    )


def test_it_keeps_the_loss_but_not_a_step_too_large_to_store():
    assert parse_metric_line("iter 99999999999: loss 2.0000") == ParsedMetric(
        step=None, loss=2.0, epoch=None, learning_rate=None, extra={}
    )


# Our JSON lines


def test_it_reads_our_json_line():
    line = (
        '{"step": 3, "loss": 1.5, "learning_rate": 2e-4, "epoch": 0.1, "grad_norm": 0.8, '
        '"tokens_per_s": 1234.5}'
    )

    assert parse_metric_line(line) == ParsedMetric(
        step=3,
        loss=1.5,
        epoch=0.1,
        learning_rate=0.0002,
        extra={"grad_norm": 0.8, "tokens_per_s": 1234.5},
    )


def test_it_reads_lr_as_learning_rate_and_ignores_the_type_marker():
    line = '{"type": "metrics", "step": 4, "loss": 1.4, "lr": 1e-4, "run": "abc"}'

    assert parse_metric_line(line) == ParsedMetric(
        step=4, loss=1.4, epoch=None, learning_rate=0.0001, extra={}
    )


def test_it_rejects_a_json_line_of_another_type():
    assert parse_metric_line('{"type": "checkpoint", "step": 500, "path": "ckpt/500"}') is None


def test_it_reads_a_json_line_with_only_a_step():
    assert parse_metric_line('{"step": 12}') == ParsedMetric(
        step=12, loss=None, epoch=None, learning_rate=None, extra={}
    )


def test_it_reads_a_json_eval_line():
    assert parse_metric_line('{"step": 100, "eval_loss": 1.9}') == ParsedMetric(
        step=100, loss=None, epoch=None, learning_rate=None, extra={"eval_loss": 1.9}
    )


def test_it_keeps_a_json_nan_loss_and_drops_json_infinity_from_extra():
    parsed = parse_metric_line('{"step": 9, "loss": NaN, "grad_norm": Infinity}')

    assert parsed is not None
    assert math.isnan(parsed.loss)
    assert (parsed.step, parsed.extra) == (9, {})


def test_it_rejects_a_json_object_without_loss_eval_loss_or_step():
    assert parse_metric_line('{"learning_rate": 0.0002, "epoch": 0.5, "grad_norm": 1.0}') is None


# Steps


@pytest.mark.parametrize(
    ("raw", "step"),
    [
        ("3", 3),
        ("3.0", 3),
        ("0", 0),
        ("-1", None),
        ("2.5", None),
        ("true", None),
        ('"3"', None),
        ("1e20", None),
        ("null", None),
    ],
)
def test_it_keeps_only_a_non_negative_integral_step(raw, step):
    parsed = parse_metric_line(f'{{"step": {raw}, "loss": 1.0}}')

    assert parsed == ParsedMetric(step=step, loss=1.0, epoch=None, learning_rate=None, extra={})


def test_it_rejects_a_line_whose_only_number_is_an_unusable_step():
    assert parse_metric_line('{"step": -1}') is None


# Booleans


def test_it_rejects_a_boolean_loss():
    assert parse_metric_line("{'loss': True}") is None
    assert parse_metric_line('{"loss": true, "step": false}') is None


def test_it_leaves_booleans_out_of_extra():
    assert parse_metric_line('{"step": 1, "loss": 1.0, "is_best": true}') == ParsedMetric(
        step=1, loss=1.0, epoch=None, learning_rate=None, extra={}
    )


# Lines that are not metrics


@pytest.mark.parametrize(
    "line",
    [
        "",
        "   ",
        "loss is high",
        "Epoch 1/3: training loss went down",
        "step 5 of 100",
        "iter x: loss y",
        "iter -5: loss 2.0",
        "iter 5: loss 2.0 is high",
        "iter 5 loss 2.0",
        "[rank0] iter 5: loss 2.0000, time 1.00ms",
        "step 200: train loss 2.1, val loss",
        "{'loss': 'abc'}",
        "{'loss': '2.31'}",
        "{'loss': None}",
        "{'loss': 1j}",
        "{'a': 1}",
        "{'learning_rate': 0.0002, 'epoch': 0.5}",
        "{}",
        '[{"loss": 1.0}]',
        "{'loss': 2.31, 'grad_norm': 1.2",
        "{'loss': 2.31, 'grad_norm': }",
        "{'loss', 'step'}",
        "{**{'loss': 1.0}}",
        "{'loss': 1.0} and more",
        "INFO trainer: {'loss': 2.0, 'epoch': 0.1}",
        '{"loss": 1.0, "epoch": 0.1',
        "{" * 5000 + "'loss'" + "}" * 4000,
        "{'loss': " + "9" * 5000 + "}",
    ],
)
def test_it_returns_none_for_a_line_that_is_not_a_metric(line):
    assert parse_metric_line(line) is None


def test_it_does_not_evaluate_code_in_a_dict_line(tmp_path):
    canary = tmp_path / "canary"
    line = f"{{'loss': open({str(canary)!r}, 'w').close(), 'step': __import__('os').getpid()}}"

    assert parse_metric_line(line) is None
    assert parse_metric_line("{'loss': __import__('os')}") is None
    assert not canary.exists()


def test_it_ignores_a_metric_line_longer_than_the_limit():
    padding = ", ".join(f"'k{i}': {i}" for i in range(MAX_LINE_CHARS // 8))
    line = f"{{'loss': 1.0, {padding}}}"

    assert len(line) > MAX_LINE_CHARS
    assert parse_metric_line(line) is None


def test_it_ignores_whitespace_that_pushes_a_line_over_the_limit():
    assert parse_metric_line(" " * MAX_LINE_CHARS + "{'loss': 1.0}") is None


@pytest.mark.parametrize(
    "line",
    [
        "Downloading shards: 100%|██████████| 2/2 [00:03<00:00,  1.52s/it]",
        "{'a': 1}",
        "{'model': 'gpt2'} not a dict line",
        "[2024-05-01 10:00:00] loss went {down}",
        "iteration 5 done",
    ],
)
def test_it_turns_plain_lines_away_before_any_parser(monkeypatch, line):
    def fail(_line):
        raise AssertionError("a plain line reached the dict parser")

    monkeypatch.setattr(metrics, "_parse_dict", fail)

    assert parse_metric_line(line) is None


def test_it_leaves_out_keys_the_database_cannot_store_and_names_them():
    parsed = parse_metric_line('{"loss": 1, "k\\u0000": 2, "\\ud800": 3, "ok": 4}')
    assert parsed.extra == {"ok": 4.0}
    assert parsed.dropped_keys == ("k\0", "\ud800")


@pytest.mark.parametrize(
    "line",
    [
        "{'loss': 2.31, 'learning_rate': 0.0002, 'epoch': 0.5}",
        '  {"step": 3, "loss": 1.5}',
        "iter 100: loss 2.4812, time 31.2ms",
        "step 500: train loss 1.8, val loss 1.9",
    ],
)
def test_a_batch_with_a_metric_line_anywhere_is_parsed(line):
    assert parse_metric_line(line) is not None
    batch = "\n".join(["warming up", line, " 10%|█         | 10/100 [00:01<00:09]"])
    assert metrics.may_hold_metric_lines(batch)


def test_a_batch_of_plain_lines_is_known_to_hold_no_metric():
    batch = "\n".join(["1", "Downloading shards", " 10%|█ | 10/100 [00:01<00:09, 9.5it/s]"])
    assert not metrics.may_hold_metric_lines(batch)


def _same(a, b) -> bool:
    return repr(a) == repr(b)  # NaN equals itself as text


@given(st.dictionaries(st.text(max_size=12), st.one_of(st.integers(), st.floats()), max_size=6))
def test_a_printed_dict_of_numbers_reads_as_the_syntax_tree_reads_it(data):
    line = repr(data)
    fast = metrics._flat_number_dict(line)
    assert _same(fast, metrics._literal_dict(line)) or fast is None
    if all("'" not in key and "\\" not in repr(key)[1:-1] for key in data):
        assert fast is not None  # the Trainer's lines take the cheap way


@given(st.text(max_size=40))
def test_any_line_the_cheap_reader_takes_reads_the_same_through_the_syntax_tree(inner):
    line = "{" + inner + "}"
    try:
        fast = metrics._flat_number_dict(line)
    except ValueError:
        fast = "refused"
    if fast is None:
        return
    try:
        slow = metrics._literal_dict(line)
    except Exception:
        slow = "refused"
    assert _same(fast, slow)
