"""The one place a problem becomes chat messages (PROTOCOL.md "Training data").

The released code appends an instruction to every problem and sends the system prompt with it, in
training rows, validation rows, the 16-sample difficulty filter and evaluation alike; a prompt that
differed between the filter and training would filter for a different task than the one trained. Each
backbone names its template in the catalog, so all four places call `chat_messages` with the same one.
"""

from __future__ import annotations

from repro import catalog


def template_for(backbone: catalog.Backbone | str) -> catalog.PromptTemplate:
    """The prompt template a backbone is trained, filtered and evaluated with: the record where the caller
    holds one (a resolved cell has its template already), its key where a name is all it has (a run's
    config.yaml, a test)."""
    record = catalog.get_backbone(backbone) if isinstance(backbone, str) else backbone
    return catalog.prompt_template(record.prompt_template)


def user_text(problem: str, template: catalog.PromptTemplate) -> str:
    """The user turn: the problem and the template's suffix (the released code joins them with a space,
    which the suffix carries)."""
    return problem + template.user_suffix


def chat_messages(problem: str, template: catalog.PromptTemplate) -> list[dict[str, str]]:
    """System prompt, the template's worked examples (each user turn with the same suffix as the problem's)
    and the user turn, in the message format chat templates and verl rows take."""
    messages = [{"role": "system", "content": template.system}]
    for user, assistant in template.examples:
        messages += [
            {"role": "user", "content": user_text(user, template)},
            {"role": "assistant", "content": assistant},
        ]
    return [*messages, {"role": "user", "content": user_text(problem, template)}]


def problem_text(user: str, template: catalog.PromptTemplate) -> str:
    """A user turn back to its bare problem (a verl row read as a candidate or a benchmark problem), so a
    suffix is never appended twice; text without the suffix is returned as it is."""
    suffix = template.user_suffix
    return user[: -len(suffix)] if suffix and user.endswith(suffix) else user


def last_user_turn(messages) -> str:
    """The problem's own user turn of a chat (the last one: a template's worked examples come before it)."""
    users = [m["content"] for m in messages if m["role"] == "user"]
    if not users:
        raise ValueError("a chat prompt without a user turn")
    return str(users[-1])
