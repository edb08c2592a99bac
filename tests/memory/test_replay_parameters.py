"""elite_buffer_vtrace's --replay_parameters: its commands' JSON parses into typed specs with the published defaults,
each bad input is one ConfigError line, and the per-buffer shares and fill-in amounts."""

import dataclasses

import pytest

from rl.errors import ConfigError
from rl.memory.replay_parameters import (
    CustomReplaySpec,
    ReplaySpec,
    fill_in_amount,
    parse_replay_parameters,
    shares,
)

# As written in elite_buffer_vtrace's README commands, spaces included.
UNIFORM = '[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "standard", "capacity": 1000, "sample_ratio": 0.5}]'  # noqa: E501
ELITE = ('[{"type": "custom", "capacity": 1000, "sample_ratio": 0.5, "dist_function":"ln_norm", '
         '"sample_strategy":"elite_sampling", "lambda_batch_multiplier":6, "alfa_annealing_factor":2.0} ,'
         '{"type": "queue", "capacity": 1, "sample_ratio": 0.5}]')


def test_elite_buffer_vtrace_uniform_command_parses_in_order():
    assert parse_replay_parameters(UNIFORM) == (ReplaySpec("queue", 1, 0.5), ReplaySpec("standard", 1000, 0.5))


def test_elite_buffer_vtrace_elite_command_parses_with_the_published_defaults():
    custom, queue = parse_replay_parameters(ELITE)
    assert custom == CustomReplaySpec("custom", 1000, 0.5, dist_function="ln_norm", p=2,
                                      sample_strategy="elite_sampling", insert_strategy=None,
                                      lambda_batch_multiplier=6, alfa_annealing_factor=2.0,
                                      elite_sampling_strategy="strategy3", elite_batch_size=20)
    assert queue == ReplaySpec("queue", 1, 0.5) and type(queue) is ReplaySpec
    assert isinstance(custom.lambda_batch_multiplier, int) and isinstance(custom.alfa_annealing_factor, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        custom.capacity = 5


def test_single_queue_and_python_literal_and_case_are_accepted():
    assert parse_replay_parameters('[{"type": "queue", "capacity": 1, "sample_ratio": 1}]') == (
        ReplaySpec("queue", 1, 1.0),)
    spec, = parse_replay_parameters("[{'type': 'CUSTOM', 'capacity': 10, 'sample_ratio': 1, 'dist_function': 'KL_DIV',"
                                    " 'insert_strategy': 'elite_insertion', 'elite_sampling_strategy': 'strategy1'}]")
    assert (spec.type, spec.dist_function, spec.insert_strategy, spec.elite_sampling_strategy) == (
        "custom", "kl_div", "elite_insertion", "strategy1")


def q(capacity=1, ratio=0.5, **extra):
    return {"type": "queue", "capacity": capacity, "sample_ratio": ratio, **extra}


def c(**extra):
    return {"type": "custom", "capacity": 1000, "sample_ratio": 0.5, "dist_function": "ln_norm", **extra}


@pytest.mark.parametrize("bad, message", [
    ('[{"type": "queue", "capacity": 1,', "not valid JSON"),
    ('{"type": "queue", "capacity": 1, "sample_ratio": 1}', "must be a list of buffers, got dict"),
    ("[]", "at least one buffer"),
    ([q(), "standard"], r"replay_parameters\[1\]: each buffer must be an object"),
    ([q(), {"type": "fifo", "capacity": 9, "sample_ratio": 0.5}],
     r"replay_parameters\[1\]: unknown type 'fifo': valid: queue, standard, custom"),
    ([q(), {"capacity": 9, "sample_ratio": 0.5}], r"\[1\]: missing key 'type'"),
    ([q(dist_function="ln_norm"), q()],
     r"\[0\] \(queue\): unknown key 'dist_function': valid: type, capacity, sample_ratio$"),
    ([c(lamda_batch_multiplier=6), q()], r"\[0\] \(custom\): unknown key 'lamda_batch_multiplier': valid: type, "
                                         r"capacity, sample_ratio, dist_function, p, sample_strategy"),
    ([{"type": "custom", "capacity": 9, "sample_ratio": 0.5}, q()], r"\(custom\): missing key 'dist_function'"),
    ([q(capacity="1000"), q()], "capacity must be a number, got '1000'"),
    ([q(capacity=6.5), q()], "capacity must be an integer, got 6.5"),
    ([q(capacity=True), q()], "capacity must be a number, got True"),
    ([c(dist_function=2), q()], "dist_function must be a string"),
    ([c(dist_function="l2"), q()], "unknown dist_function 'l2': valid: ln_norm, cos_dist, kl_div"),
    ([c(elite_sampling_strategy="strategy5"), q()], "unknown elite_sampling_strategy 'strategy5'"),
    ([c(sample_strategy="prioritized"), q()], "unknown sample_strategy 'prioritized'"),
    ([q(capacity=0), q()], r"\[0\] \(queue\): capacity must be >= 1, got 0"),
    ([c(lambda_batch_multiplier=0), q()], "lambda_batch_multiplier must be >= 1"),
    ([c(alfa_annealing_factor=0), q()], "alfa_annealing_factor must be > 0"),
    ([q(ratio=1.5), q(ratio=-0.5)], "sample_ratio must be <= 1"),
    ([q(ratio=0.5), q(ratio=0.4)], "sample_ratios must sum to 1, got 0.5 \\+ 0.4 = 0.9"),
])
def test_each_bad_setting_is_one_config_error_line(bad, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_replay_parameters(bad)
    assert "\n" not in str(info.value)


def test_ratios_summing_to_one_within_tolerance_pass():
    assert len(parse_replay_parameters([q(ratio=0.3), q(ratio=0.6), q(ratio=0.1)])) == 3  # sums to 1 - 1e-16


def test_shares_are_whole_and_a_non_integer_or_zero_share_is_one_line():
    specs = parse_replay_parameters(UNIFORM)
    assert shares(specs, 10) == [5, 5]
    assert shares(parse_replay_parameters([q(ratio=0.29), q(ratio=0.71)]), 100) == [29, 71]  # 28.999999999999996
    assert shares(parse_replay_parameters([q(ratio=0.8), q(ratio=0.2)]), 10) == [8, 2]
    for ratios, batch, share in (([1 / 3] * 3, 10, "3.33333"), ([0.36, 0.64], 10, "3.6")):
        with pytest.raises(ConfigError, match=rf"\[0\] \(queue\): sample_ratio .* of batch_rollouts {batch} is "
                                              rf"{share} sequences: a share must be a whole number") as info:
            shares(parse_replay_parameters([q(ratio=r) for r in ratios]), batch)  # elite_buffer_vtrace refuses it too
        assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"\[0\] \(queue\): sample_ratio 0 of batch_rollouts 10 is 0 sequences"):
        shares(parse_replay_parameters([q(ratio=0.0), q(ratio=1.0)]), 10)


def test_fill_in_amount():
    queue, standard = parse_replay_parameters(UNIFORM)
    assert fill_in_amount(standard, 10) == 200  # 0.2 * 1000 > 10 * 10
    assert fill_in_amount(standard, 50) == 500  # 10 * 50 > 0.2 * 1000
    assert fill_in_amount(standard, 200) == 1000  # 2000 would never come: the buffer signals when full
    assert fill_in_amount(queue, 10) == 1  # a queue starts when it holds its capacity
    assert fill_in_amount(ReplaySpec("queue", 500, 1.0), 10) == 500  # not max(0.2 * 500, 10 * 10) = 100
    odd = ReplaySpec("standard", 1003, 1.0)
    assert fill_in_amount(odd, 1, training_fill_in_factor=0.2) == 201  # 200.6, rounded up


def test_one_parser_reads_each_kinds_spelling_with_its_own_table():
    """Bug caught: the two kinds' tables or aliases crossed (a transition buffer typed `standard` refused, or turned
    into a sequence buffer; a sequence buffer typed `replay` refused; `custom` accepted for transitions), or a
    transition buffer's own settings dropped."""
    from rl.memory.replay_parameters import TransitionReplaySpec, buffer_types

    text = '[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "standard", "capacity": 9, ' \
           '"sample_ratio": 0.5, "per_alpha": 0.7}]'
    fresh, replayed = parse_replay_parameters(text, "transitions")
    assert fresh == TransitionReplaySpec("queue", 1, 0.5) and fresh.settings == {}
    assert replayed == TransitionReplaySpec("replay", 9, 0.5, {"per_alpha": 0.7})
    assert parse_replay_parameters(UNIFORM.replace("standard", "replay")) == parse_replay_parameters(UNIFORM)
    assert set(buffer_types("sequences")) == {"queue", "standard", "custom"}
    assert {"replay", "prioritized", "attentive", "queue"} <= set(buffer_types("transitions"))
    assert not {"mixed", "rollout", "custom", "standard"} & set(buffer_types("transitions"))
    with pytest.raises(ConfigError, match=r"\[0\]: unknown type 'custom': valid: attentive, prioritized, queue, "
                                          r"replay \(transition buffers; standard means replay\)$"):
        parse_replay_parameters([c(ratio=1.0)], "transitions")
    with pytest.raises(ConfigError, match=r"\[0\] \(queue\): unknown key 'per_alpha': valid: type, capacity, "
                                          r"sample_ratio$"):
        parse_replay_parameters([q(ratio=1.0, per_alpha=0.7)])  # a sequence buffer has no settings of its own
