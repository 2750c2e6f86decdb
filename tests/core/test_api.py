"""The one API idiom (`apps.core.api`): a bad body is a 400 naming its first bad field, and
every list has one shape."""

import pytest
from rest_framework import serializers

from apps.core.api import page_body, page_out, validated
from apps.core.errors import InvalidRequest
from apps.core.serializers import StrictSerializer


class StepIn(StrictSerializer):
    gpus = serializers.IntegerField(min_value=1)


class PlanIn(StrictSerializer):
    name = serializers.CharField()
    steps = StepIn(many=True)


def test_a_valid_body_comes_back_as_a_dict():
    assert validated(PlanIn, {"name": "a", "steps": [{"gpus": 2}]}) == {
        "name": "a",
        "steps": [{"gpus": 2}],
    }


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({"name": "a", "steps": [{"gpus": 0}]}, "steps.0.gpus", "greater than or equal to 1"),
        ({"name": "a", "steps": [{"gpus": 1, "gpu": 1}]}, "steps.0.gpu", "Unknown field."),
        ({"steps": []}, "name", "This field is required."),
        ([{"name": "a"}], None, "Expected a dictionary"),
    ],
)
def test_a_bad_body_names_its_first_bad_field(body, param, message):
    with pytest.raises(InvalidRequest) as raised:
        validated(PlanIn, body)
    assert raised.value.param == param
    assert message in str(raised.value.detail)


def test_a_list_has_one_shape_with_its_head_first():
    rows = [{"gpus": 1}, {"gpus": 2}]
    body = page_body(rows, StepIn, next_cursor="c", total=7, head={"object": "list"})
    assert list(body) == ["object", "data", "next_cursor", "total"]
    assert body == {
        "object": "list",
        "data": [{"gpus": 1}, {"gpus": 2}],
        "next_cursor": "c",
        "total": 7,
    }


def test_a_page_schema_names_the_page_and_its_fields():
    page = page_out(StepIn, "StepPage", doc="Steps.", object=serializers.CharField())
    assert (page.__name__, page.__doc__) == ("StepPage", "Steps.")
    assert list(page().fields) == ["object", "data", "next_cursor", "total"]
