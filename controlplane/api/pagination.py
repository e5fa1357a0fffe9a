"""Page-number pagination: `{"count", "next", "previous", "results"}`, `?page=`, `?page_size=`.

Both parameters are validated: a page or page size that is not a positive integer, a page
size above the maximum and a page past the last one are a 400 with a message per parameter
(never a silent fallback, never a 404 for a list that exists).
"""

from django.core.paginator import InvalidPage
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

MAX_PAGE_SIZE = 200


class PagingInput(serializers.Serializer):
    page = serializers.IntegerField(min_value=1, required=False, help_text="Page number.")
    page_size = serializers.IntegerField(
        min_value=1, max_value=MAX_PAGE_SIZE, required=False, help_text="Rows per page."
    )


class Pagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE
    last_page_strings = ()

    def paginate_queryset(self, queryset, request, view=None):
        params = {
            name: request.query_params[name]
            for name in ("page", "page_size")
            if name in request.query_params
        }
        checked = PagingInput(data=params)
        checked.is_valid(raise_exception=True)
        page_size = checked.validated_data.get("page_size") or self.page_size
        number = checked.validated_data.get("page", 1)
        paginator = self.django_paginator_class(queryset, page_size)
        try:
            self.page = paginator.page(number)
        except InvalidPage as error:
            last = paginator.num_pages
            raise serializers.ValidationError(
                {"page": [f"No page {number}: the last page is {last}."]}
            ) from error
        self.request = request
        return list(self.page)


def paginated_response(request, view, queryset, serializer_class, prepare=None) -> Response:
    """One page of `queryset`, serialized; `prepare(page)` (a selector's) may first load what
    the page's rows need in one query."""
    paginator = Pagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    if prepare is not None:
        page = prepare(page)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)
