"""Page-number pagination: `{"count", "next", "previous", "results"}`, `?page=`, `?page_size=`."""

from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response


class Pagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 200


def paginated_response(request, view, queryset, serializer_class) -> Response:
    paginator = Pagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)
