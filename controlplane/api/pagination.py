"""Page-number pagination: `{"count", "next", "previous", "results"}`, `?page=`, `?page_size=`.

Both parameters are validated: a page or page size that is not a positive integer, a page
size above the maximum and a page past the last one are a 400 with a message per parameter
(never a silent fallback, never a 404 for a list that exists).

A page of a queryset is one query: the rows, each carrying the list's total from a scalar
subquery the database evaluates once (`page_with_total`), so the count and the rows agree and
a page costs one round trip, not two. Only a page past the end counts again, to name the last
page.
"""

from django.core.paginator import InvalidPage, Page, Paginator
from django.db.models import Func, IntegerField, QuerySet, Subquery
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

from controlplane.api.prepared import BoundList

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
            if isinstance(queryset, BoundList) or (
                isinstance(queryset, QuerySet) and counted_in_one_query(queryset)
            ):
                self.page = page_with_total(paginator, number)
            else:
                self.page = paginator.page(number)
        except InvalidPage as error:
            last = paginator.num_pages
            raise serializers.ValidationError(
                {"page": [f"No page {number}: the last page is {last}."]}
            ) from error
        self.request = request
        return list(self.page)


TOTAL = "pagination_total"


def counted_in_one_query(queryset: QuerySet) -> bool:
    """Whether COUNT over the queryset's rows is its length: not for a grouped or distinct one
    (those count apart, as Django's paginator does)."""
    query = queryset.query
    return not (query.group_by or query.distinct or query.combinator or query.is_sliced)


def page_with_total(paginator: Paginator, number: int) -> Page:
    """Page `number` of the paginator's queryset (or prepared list) and the list's total, in
    one query.

    The total is an uncorrelated scalar subquery beside the rows (evaluated once, not per
    row); the rows keep their LIMIT/OFFSET plan. `InvalidPage` for a page past the last.
    """
    listed = paginator.object_list
    bottom = (number - 1) * paginator.per_page
    top = bottom + paginator.per_page

    def page_of(queryset: QuerySet) -> QuerySet:
        total = (
            queryset.order_by()
            .annotate(**{TOTAL: Func("pk", function="COUNT", output_field=IntegerField())})
            .values(TOTAL)
        )
        return queryset.annotate(**{TOTAL: Subquery(total)})[bottom:top]

    rows = []
    if top < 2**63:  # an OFFSET the databases can take
        if isinstance(listed, BoundList):
            rows = listed.rows(page_of, shape=(bottom, top))
        else:
            rows = list(page_of(listed))
    if rows:
        first = rows[0]
        paginator.count = first[TOTAL] if isinstance(first, dict) else getattr(first, TOTAL)
    elif number == 1:
        paginator.count = 0
    else:
        queryset = listed.queryset() if isinstance(listed, BoundList) else listed
        paginator.count = queryset.count()
    if number > 1 and not rows:
        paginator.validate_number(number)  # raises EmptyPage, naming the last page
    return Page(rows, number, paginator)


def paginated_response(request, view, queryset, serializer_class) -> Response:
    """One page of `queryset`, serialized."""
    paginator = Pagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)
