"""The exceptions of aggswitch: one class per status code of the C++ client.

Every failed call raises a subclass of :class:`Error`; ``error.code`` is the
C++ status code's name (``"UNAVAILABLE"``, ...) and ``str(error)`` its
message, word for word.
"""


class Error(Exception):
    """A failed aggswitch call. ``code``: the C++ status code's name."""

    code = "UNKNOWN"


class InvalidArgumentError(Error, ValueError):
    """A bad option or argument; nothing was sent."""

    code = "INVALID_ARGUMENT"


class UnavailableError(Error):
    """No result in time (a rank stopped, the switch is unreachable), or a
    socket error."""

    code = "UNAVAILABLE"


class IncompleteError(Error):
    """The switch (or the job's TAN) gave up on some ranks' data: the result
    lacks their contributions."""

    code = "INCOMPLETE"


class FailedPreconditionError(Error):
    """The switch refused the job, or the client cannot go on after an
    earlier failure (create a new one with a new job id)."""

    code = "FAILED_PRECONDITION"


class ResourceExhaustedError(Error):
    """The switch's job table is full."""

    code = "RESOURCE_EXHAUSTED"


class OutOfRangeError(Error, OverflowError):
    """An int32 sum overflowed (the buffer holds the clamped values there)."""

    code = "OUT_OF_RANGE"


_BY_CODE = {cls.code: cls for cls in (InvalidArgumentError, UnavailableError, IncompleteError,
                                      FailedPreconditionError, ResourceExhaustedError,
                                      OutOfRangeError)}


def from_status(code: str, message: str) -> Error:
    """The exception for a C++ status (its code's name and its message)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        error = Error(message)
        error.code = code
        return error
    return cls(message)
