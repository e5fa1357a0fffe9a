"""drf-spectacular extensions: what the schema says beyond the serializers' fields.

Imported by controlplane.api.views so that they are registered before the schema is built.
"""

from drf_spectacular.extensions import OpenApiSerializerExtension

from controlplane.api.common import RejectUnknownFieldsMixin


class RejectUnknownFieldsExtension(OpenApiSerializerExtension):
    """Input serializers that refuse unknown keys: `additionalProperties: false`."""

    target_class = RejectUnknownFieldsMixin
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        if direction == "request":
            schema["additionalProperties"] = False
        return schema
