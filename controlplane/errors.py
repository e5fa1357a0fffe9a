"""Domain errors raised by services; the API layer turns them into responses.

`DomainError` becomes a 400 (with the message under `field` when one is named) and
`ConflictError` a 409 (the request was well formed but the object's state forbids it),
`NotFoundError` a 404.
"""


class DomainError(Exception):
    status_code = 400

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field

    def as_body(self) -> dict:
        if self.field:
            return {self.field: [self.message]}
        return {"detail": self.message}


class ConflictError(DomainError):
    status_code = 409


class NotFoundError(DomainError):
    """The object named does not exist (for this caller): a 404."""

    status_code = 404
