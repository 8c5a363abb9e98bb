"""The one place a problem becomes chat messages (PROTOCOL.md "Training data").

The released code appends an instruction to every problem and sends the system prompt with it, in
training rows, validation rows, the 16-sample difficulty filter and evaluation alike; a prompt that
differed between the filter and training would filter for a different task than the one trained. Each
backbone names its template in the catalog, so all four places call `chat_messages` with the same one.
"""

from __future__ import annotations

from repro import catalog


def template_for(backbone: str) -> catalog.PromptTemplate:
    """The prompt template a backbone is trained, filtered and evaluated with."""
    return catalog.prompt_template(catalog.get_backbone(backbone).prompt_template)


def user_text(problem: str, template: catalog.PromptTemplate) -> str:
    """The user turn: the problem and the template's suffix (the released code joins them with a space,
    which the suffix carries)."""
    return problem + template.user_suffix


def chat_messages(problem: str, template: catalog.PromptTemplate) -> list[dict[str, str]]:
    """System prompt and user turn, in the message format chat templates and verl rows take."""
    return [{"role": "system", "content": template.system}, {"role": "user", "content": user_text(problem, template)}]


def problem_text(user: str, template: catalog.PromptTemplate) -> str:
    """A user turn back to its bare problem (a verl row read as a candidate or a benchmark problem), so a
    suffix is never appended twice; text without the suffix is returned as it is."""
    suffix = template.user_suffix
    return user[: -len(suffix)] if suffix and user.endswith(suffix) else user
