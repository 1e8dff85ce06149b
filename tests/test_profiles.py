"""papa.method.profiles against matrices built by hand: pure first-token, previous-token, self and uniform causal
heads, rows no example reached, and shares read per row relative to the row's mass."""

import numpy as np
import pytest
import torch

from papa.method.profiles import head_kind, head_profiles

T = 6


def causal_uniform():
    return np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]


def hand_made():
    first = np.zeros((T, T)); first[:, 0] = 1
    previous = np.zeros((T, T)); previous[0, 0] = 1; previous[np.arange(1, T), np.arange(T - 1)] = 1
    itself = np.eye(T)
    return np.stack([first, previous, itself, causal_uniform()])[None]  # (1, 4, T, T)


def test_shares_and_kinds_of_pure_heads():
    profiles = head_profiles(torch.tensor(hand_made()))
    # the previous-token head's row 1 attends to position 0, which is its first token too
    np.testing.assert_allclose(profiles["first"][0].numpy(), [1, 1 / (T - 1), 0,
                                                               np.mean([1 / (i + 1) for i in range(1, T)])])
    np.testing.assert_allclose(profiles["previous"][0].numpy(), [1 / (T - 1), 1, 0,  # likewise the first-token head
                                                                  np.mean([1 / (i + 1) for i in range(1, T)])])
    np.testing.assert_allclose(profiles["self"][0].numpy(), [0, 0, 1, np.mean([1 / (i + 1) for i in range(1, T)])])
    # uniform over 0..i: mean |i − j| = i/2
    np.testing.assert_allclose(profiles["distance"][0].numpy(), [np.mean(range(1, T)), 1, 0,
                                                                  np.mean([i / 2 for i in range(1, T)])])
    assert [head_kind(profiles, 0, h) for h in range(4)] == ["first token", "previous token", "self", "broad"]


def test_rows_no_example_reached_are_left_out_and_rows_are_read_relative_to_their_mass():
    a = np.zeros((1, 1, T, T))
    a[0, 0, 1:3, 0] = 0.5  # rows 1 and 2 reached by half the examples, all of it on the first token
    profiles = head_profiles(torch.tensor(a))
    assert profiles["first"][0, 0] == pytest.approx(1.0)
    assert head_kind(profiles, 0, 0) == "first token"
