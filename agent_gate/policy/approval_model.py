"""An approve rule's ``approval:`` block as a policy file writes it: the grants an
approver may give, how many people must agree, the wait's deadline and the fields an
approver may edit.

Why a block of its own: an approve rule alone says "a person answers each call".
Two other answers are common and both are about *who* and *how much*, never about
the call's own decision, so they sit beside the rule, not in its ``when``:

* ``grants``: options the approver may pick when approving, each covering more
  calls of the same tool in the same task for a while or a number of calls, and
  only for arguments within the option's own ``when`` (``to`` in one domain,
  ``amount <= 500``). The policy offers them; the approver only chooses one. A
  grant is bound to the policy's hash: another policy never honours it.
* ``approvers``: a quorum (``min`` distinct approvers, optionally of ``roles``);
  ``deny: any`` (the default) ends the call at the first denial, ``deny: quorum``
  only when ``min`` distinct people denied it.

A rule that asks for a quorum may not offer grants: one person choosing a grant
would let later calls past a rule that wants two.

The same block holds the wait's deadline (``timeout``, ``then``: ``policy.deadline``
says why and how it is kept) and the fields an approver may edit (``editable``:
``policy.edits``). What the block asks of one call's answers, read off a whole
document, is ``policy.approval``'s; these models sit below ``policy.model`` (whose
``Rule.approval`` they are) and need nothing of it but the condition models.

A file that uses neither keeps the hash it had before the block existed
(``Rule``'s serializer drops an absent block).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    StringConstraints,
    model_validator,
)

from agent_gate.policy.condition_model import Condition
from agent_gate.policy.scalars import (
    STRICT,
    ArgPathText,
    Duration,
    RoleName,
    Text,
    listify,
    seconds_of,
)

__all__ = [
    "MAX_EDITED_FIELDS",
    "MAX_QUORUM",
    "Escalate",
    "GrantOption",
    "Quorum",
    "RuleApproval",
]

MAX_EDITED_FIELDS: Final = 64
"""Fields one rule may mark editable, and one edit may change."""


MAX_QUORUM = 20
"""More distinct approvers than this is a typo, not a control."""
_OptionId = Annotated[StrictStr, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]


class _Model(BaseModel):
    # A key is read by its alias only (``for``): the Python name ``for_`` beside it in a
    # policy file is an unknown key like any other, refused as the rest of the file is.
    model_config = STRICT


class Escalate(BaseModel):
    """``then: {escalate: ROLE}``: the call keeps waiting, answerable only by ROLE."""

    model_config = STRICT
    escalate: RoleName


class GrantOption(_Model):
    """One grant an approver may choose: ``for`` a while and/or up to ``calls`` more
    calls of this tool in this task, for arguments where every ``when`` holds."""

    id: _OptionId
    for_: Duration | None = Field(None, alias="for")
    calls: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None
    when: Annotated[list[Condition], BeforeValidator(listify)] = []
    description: Text | None = None

    @model_validator(mode="after")
    def _bounded(self) -> GrantOption:
        if self.for_ is None and self.calls is None:
            raise ValueError("a grant needs 'for: DURATION' or 'calls: N' (or both): "
                             "one without either would cover the task for ever")
        return self

    @property
    def seconds(self) -> int | None:
        """How long the grant lasts from when it is given (None: no time limit)."""
        return None if self.for_ is None else seconds_of(self.for_)

    def summary(self) -> str:
        """The option as an approver reads it before choosing it."""
        parts = []
        if self.for_ is not None:
            parts.append(f"for {self.for_}")
        if self.calls is not None:
            parts.append(f"up to {self.calls} more call{'s' if self.calls != 1 else ''}")
        if self.when:
            parts.append(f"{len(self.when)} argument bound{'s' if len(self.when) != 1 else ''}")
        return f"{self.id}: " + ", ".join(parts) + (f" ({self.description})"
                                                     if self.description else "")


class Quorum(_Model):
    """How many distinct people must approve, of which roles, and what one denial does."""

    min: Annotated[StrictInt, Field(ge=1, le=MAX_QUORUM)] = 1
    distinct: StrictBool = True
    roles: list[RoleName] = []
    deny: Literal["any", "quorum"] = "any"

    @model_validator(mode="after")
    def _people(self) -> Quorum:
        if not self.distinct:
            raise ValueError("distinct: false would let one person satisfy a rule that "
                             "wants several; a quorum counts distinct approvers")
        return self


class RuleApproval(_Model):
    """An approve rule's ``approval:`` block."""

    grants: list[GrantOption] = []
    approvers: Quorum | None = None
    timeout: Duration | None = None
    then: Literal["deny"] | Escalate = "deny"
    editable: Annotated[list[ArgPathText], Field(max_length=MAX_EDITED_FIELDS)] = []
    """Argument paths the approver may change before approving (``policy.edits``): the
    edited call is judged again and runs with the new arguments, the agent told so. No
    ``*``: an edit names one field."""

    @model_validator(mode="before")
    @classmethod
    def _needs_timeout(cls, data: Any) -> Any:
        if isinstance(data, dict) and "then" in data and "timeout" not in data:
            raise ValueError("'then' needs a 'timeout' (how long a person has to answer)")
        return data

    @property
    def timeout_ms(self) -> int | None:
        """The deadline of a wait this rule starts (None: it waits as long as it takes)."""
        return None if self.timeout is None else seconds_of(self.timeout) * 1000

    @property
    def escalate_to(self) -> str | None:
        return self.then.escalate if isinstance(self.then, Escalate) else None

    @model_validator(mode="after")
    def _coherent(self) -> RuleApproval:
        ids = [g.id for g in self.grants]
        if len(ids) != len(set(ids)):
            raise ValueError("grant ids must be unique within a rule")
        if len(set(self.editable)) != len(self.editable):
            raise ValueError("'editable' names a field twice")
        if self.grants and self.approvers is not None and self.approvers.min > 1:
            raise ValueError("a rule that asks for a quorum may not offer grants: one "
                             "approver's grant would let later calls past it")
        return self
