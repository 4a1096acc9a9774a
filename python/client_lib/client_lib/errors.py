"""Exceptions of client_lib.

Everything client_lib raises on purpose is a ClientLibError. Answers of the
API that are errors are APIError subclasses carrying the API's error body
``{"error": {"code", "message", "field"}}`` as attributes, so that a script
can tell which field of its request was refused::

    try:
        client_lib.Job(..., max_retry=1000).submit()
    except client_lib.InvalidRequestError as e:
        print(e.field, e.code, e.message)   # max_retry invalid_value must be between ...
"""


class ClientLibError(Exception):
    """The base class of every exception client_lib raises."""


class ConfigError(ClientLibError, ValueError):
    """client_lib is not configured: ``variable`` names the missing or bad
    environment variable (TRAINQ_API_URL, TRAINQ_API_TOKEN, ...)."""

    def __init__(self, variable, message):
        super().__init__(message)
        self.variable = variable


class APIError(ClientLibError):
    """An error answer of trainq's API (or no answer at all).

    status: the HTTP status (0 when the server could not be reached)
    code: the API's error code (unknown_field, invalid_value, not_found, ...)
    field: the request field the error is about ("" when none), e.g.
        ``max_retry``, ``env_variables.A``, ``health_params.action``
    message: the API's sentence
    method, path: the request
    retry_after: the Retry-After of a 429/503 answer, in seconds, or None
    body: the raw answer (bytes)
    """

    def __init__(self, status, code="", message="", field="", method="", path="", retry_after=None, body=b""):
        self.status = status
        self.code = code or ""
        self.message = message or ""
        self.field = field or ""
        self.method = method
        self.path = path
        self.retry_after = retry_after
        self.body = body
        super().__init__(self._text())

    def _text(self):
        s = "%s %s -> %s" % (self.method, self.path, self.status or "no answer")
        if self.code:
            s += " %s" % self.code
        if self.field:
            s += " (field %s)" % self.field
        if self.message:
            s += ": %s" % self.message
        return s


class APIConnectionError(APIError):
    """The API could not be reached (connection refused, reset, timed out)."""


class InvalidRequestError(APIError):
    """400 or 422: the request was refused; ``field`` names the field."""


class BadRequestError(InvalidRequestError):
    """400: malformed JSON, a wrong JSON type, an unknown or repeated field,
    an unknown query parameter."""


class ValidationError(InvalidRequestError):
    """422: a value out of range or not allowed."""


class UnauthorizedError(APIError):
    """401: no token, or a token the API does not know (TRAINQ_API_TOKEN)."""


class ForbiddenError(APIError):
    """403."""


class NotFoundError(APIError):
    """404: no such job (or one of another workspace), or no such path."""


class JobNotFoundError(NotFoundError):
    """404 for a job name."""


class ConflictError(APIError):
    """409: an Idempotency-Key reused for another request, or a job that is
    not running for an action that needs it."""


class RequestTooLargeError(InvalidRequestError):
    """413: the request (or one field of it, ``field``) is too large."""


class RetryableError(APIError):
    """429 or 503 answered more often than client_lib retries."""


class TooManyRequestsError(RetryableError):
    """429: too many connections, or the allocation's queue is full."""


class ServiceUnavailableError(RetryableError):
    """503: Temporal or trainq-worker did not answer in time."""


_BY_STATUS = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: RequestTooLargeError,
    415: BadRequestError,
    422: ValidationError,
    429: TooManyRequestsError,
    503: ServiceUnavailableError,
}


def error_class(status):
    """The APIError subclass of an HTTP status."""
    return _BY_STATUS.get(status, APIError)
