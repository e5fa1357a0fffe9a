"""The console's forms (memory filters, memory content, task flags): input checks only;
services do the rest."""

import re

from django import forms

from automemory.selectors import CONSOLE_SEARCH_MAX_CHARS
from controlplane.errors import DomainError
from controlplane.limits import (
    MEMORY_CITATION_PATH_MAX_CHARS,
    MEMORY_MAX_CHARS,
    MEMORY_MAX_CITATIONS,
)
from controlplane.models import MemoryScope, MemorySource, MemoryStatus

_ANY = [("", "Any")]


class ProjectMemoryFilterForm(forms.Form):
    """Filters of a project's memory list (all optional; a bad value is a 400)."""

    q = forms.CharField(
        label="Search",
        required=False,
        max_length=CONSOLE_SEARCH_MAX_CHARS,
        strip=True,
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "Words in the memory"}),
    )
    source = forms.ChoiceField(label="Source", required=False, choices=_ANY + MemorySource.choices)
    status = forms.ChoiceField(label="Status", required=False, choices=_ANY + MemoryStatus.choices)
    scope = forms.ChoiceField(
        label="Scope",
        required=False,
        choices=[
            (MemoryScope.PROJECT, "This project's memories"),
            (MemoryScope.USER, "My own user-level memories"),
        ],
    )


class MyMemoryFilterForm(forms.Form):
    """Filters of the signed-in user's own memories."""

    q = ProjectMemoryFilterForm.base_fields["q"]
    status = ProjectMemoryFilterForm.base_fields["status"]


class MemoryContentForm(forms.Form):
    """The text of a memory written or edited by hand (the service checks it for secrets)."""

    content = forms.CharField(
        label="Memory",
        max_length=MEMORY_MAX_CHARS,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 6}),
        help_text=(
            "A short fact worth remembering. Secrets are refused; text that reads like "
            "instructions to the agent is flagged."
        ),
    )

    def add_domain_error(self, error: DomainError) -> None:
        """Show a service's refusal under the field it names (else above the form)."""
        field = error.field if error.field in self.fields else None
        message = error.message
        if (
            field is None
            and (error.field or "").startswith("citations[")
            and "citations" in self.fields
        ):
            # `citations[2].end_line`: under the citations, saying which line of them.
            index = int(error.field.split("[", 1)[1].split("]", 1)[0])
            field, message = "citations", f"Line {index + 1}: {error.message}"
        self.add_error(field, message)


CITATION_LINE = re.compile(r"^(?P<path>.+):(?P<start>\d{1,9})(?:-(?P<end>\d{1,9}))?$")


class MemoryEditForm(MemoryContentForm):
    """A project memory's text and the code it cites, one `path:start-end` a line (checked
    against the default branch by the service)."""

    citations = forms.CharField(
        label="Cites",
        required=False,
        strip=True,
        max_length=MEMORY_MAX_CITATIONS * (MEMORY_CITATION_PATH_MAX_CHARS + 24),
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=(
            "Lines of the project's code it speaks of, one a line: path:start-end "
            f"(at most {MEMORY_MAX_CITATIONS}). Empty: it cites nothing."
        ),
    )

    def clean_citations(self) -> list[dict]:
        found = []
        lines = [line.strip() for line in self.cleaned_data["citations"].splitlines()]
        for line in filter(None, lines):
            matched = CITATION_LINE.match(line)
            if matched is None:
                raise forms.ValidationError(f"{line[:80]!r} is not path:start-end.")
            start = int(matched["start"])
            found.append(
                {
                    "path": matched["path"],
                    "start_line": start,
                    "end_line": int(matched["end"] or start),
                }
            )
        if len(found) > MEMORY_MAX_CITATIONS:
            raise forms.ValidationError(f"At most {MEMORY_MAX_CITATIONS} citations.")
        return found


def citations_text(citations: list[dict]) -> str:
    """A memory's citations as the edit form shows them."""
    return "\n".join(f"{c['path']}:{c['start_line']}-{c['end_line']}" for c in citations)


# Three states of a task flag: follow the user's setting (NULL), on, off.
FLAG_CHOICES = [("follow", "Follow the setting"), ("on", "On"), ("off", "Off")]
_FLAG_VALUES = {"follow": None, "on": True, "off": False}


def flag_choice(value: bool | None) -> str:
    """The form value of a stored flag."""
    return {None: "follow", True: "on", False: "off"}[value]


class TaskFlagsForm(forms.Form):
    """A task's auto memory overrides."""

    use_memories = forms.ChoiceField(
        label="Use memories",
        choices=FLAG_CHOICES,
        widget=forms.RadioSelect,
        help_text="Whether this task's first turn receives past memories.",
    )
    generate_memories = forms.ChoiceField(
        label="Generate a memory",
        choices=FLAG_CHOICES,
        widget=forms.RadioSelect,
        help_text="Whether this task may become a memory once it is completed and idle.",
    )

    def changes(self) -> dict[str, bool | None]:
        """The validated flags as the service takes them (None follows the user)."""
        return {name: _FLAG_VALUES[self.cleaned_data[name]] for name in self.fields}
