"""papa.fork_server.call: a function's result from a fresh child, its error with the child's traceback, and a
child killed before answering as an error instead of a wait."""

import os
import signal

import pytest

from papa import fork_server


def pid_and_square(x):
    return os.getpid(), x * x


def fail():
    raise ValueError("bad input in the child")


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def test_call_runs_in_a_fresh_child():
    (pid, square), (other, _) = fork_server.call(pid_and_square, 7), fork_server.call(pid_and_square, 1)
    assert square == 49 and pid != os.getpid() and other != pid


def test_a_failing_or_killed_child_is_an_error():
    with pytest.raises(RuntimeError, match=r"(?s)test_fork_server.fail failed:.*ValueError: bad input in the child"):
        fork_server.call(fail)
    with pytest.raises(RuntimeError, match=r"test_fork_server.die died without an answer \(exit status -9\)"):
        fork_server.call(die)
