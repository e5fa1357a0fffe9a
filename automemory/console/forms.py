"""The console's forms (memory filters, memory content, task flags): input checks only;
services do the rest."""

from django import forms

from automemory.selectors import CONSOLE_SEARCH_MAX_CHARS
from controlplane.errors import DomainError
from controlplane.limits import MEMORY_MAX_CHARS
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
        self.add_error(field, error.message)


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
