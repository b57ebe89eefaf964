"""The facts playbook a fleet runs before dispatch writes nothing on a host: the frozen
file reaches `pgsweep facts -` on its stdin, through Ansible's own templating, byte for
byte, even where the file holds what looks like a Jinja expression of Ansible's."""

from __future__ import annotations

import pytest

from pgsweep.engine import fleet

TEXT = """[experiment]
name = "{{ lookup('pipe', 'id') }}"  # a name, not an expression
seed = 1
[workload]
script = "x.sql"  # {% raw %} and {# #} too: é, 中
"""


def test_the_facts_play_sends_the_file_on_stdin_and_makes_nothing() -> None:
    (play,) = fleet._facts_playbook(["alpha-h1"], TEXT)
    modules = [next(k for k in t if k not in ("name", "register", "changed_when"))
               for t in play["tasks"]]  # fmt: skip
    assert modules == ["command", "assert", "command"]  # no tempfile, copy or file task
    facts = play["tasks"][-1]["command"]
    assert facts["argv"][1:] == ["facts", "-"]
    assert "{{ lookup" not in facts["stdin"]  # the file is not in the template as text


def test_ansibles_templating_gives_the_file_back_unchanged() -> None:
    templar_mod = pytest.importorskip("ansible.template")  # the [fleet] extra
    from ansible.parsing.dataloader import DataLoader

    (play,) = fleet._facts_playbook(["alpha-h1"], TEXT)
    stdin = play["tasks"][-1]["command"]["stdin"]
    rendered = templar_mod.Templar(loader=DataLoader()).template(stdin)
    assert rendered == TEXT
