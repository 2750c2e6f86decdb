"""The New Job page: its two forms, what they create, the errors next to their fields, and
the live quote partial."""

from __future__ import annotations

import base64
import html
import json
import re
import subprocess
import sys

import pytest

from apps.core.errors import InvalidRequest
from apps.finetunes.payloads import CONFIG_ENV as FINETUNE_CONFIG_ENV
from apps.finetunes.payloads import SCRIPT as FINETUNE_SCRIPT
from apps.finetunes.payloads import TRAINER_MISSING
from apps.jobs.models import Job
from apps.jobs.web.forms import ContainerJobForm
from apps.secrets import services as secret_services
from tests.factories import ProjectFactory, uploaded_dataset

pytestmark = pytest.mark.django_db

PAGE = "/o/acme/projects/vision/jobs/new/"
QUOTE = "/o/acme/quote/"
CPU_PRICE = "$0.10 / h"  # the seeded local cpu offer: one price, not a band of one
ED25519 = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKnJ7EhDh6K3ZhaM4lAQYb6yVH6GZ3V0bTK1b1uYb9Zs you@host"
)


def container_data(**overrides) -> dict:
    data = {
        "form": "container",
        "name": "train-resnet",
        "image": "python:3.11-slim",
        "command": "",
        "script": "",
        "script_b64": "",
        "accelerator": "cpu",
        "gpu_count": "1",
        "disk_gb": "10",
        "env": "",
        "secrets": "",
        "max_runtime_hours": "",
        "max_cost_usd": "",
        "max_price_usd_hr": "",
        "ssh_public_key": "",
    }
    data.update(overrides)
    return data


def finetune_data(**overrides) -> dict:
    data = {
        "form": "finetune",
        "name": "support-bot",
        "model": "Qwen/Qwen2.5-0.5B-Instruct",
        "dataset": "tatsu-lab/alpaca",
        "dataset_format": "alpaca",
        "max_samples": "",
        "max_steps": "",
        "learning_rate": "0.0002",
        "accelerator": "cpu",
        "gpu_count": "1",
        "disk_gb": "20",
    }
    data.update(overrides)
    return data


def field_errors(response, field_id: str) -> list[str]:
    """The messages in the error list Django renders next to the field `field_id`."""
    body = response.content.decode()
    found = re.search(rf'<ul class="errorlist" id="{field_id}_error">(.*?)</ul>', body, re.S)
    if found is None:
        return []
    return [html.unescape(item) for item in re.findall(r"<li>(.*?)</li>", found.group(1))]


def all_field_error_ids(response) -> list[str]:
    return re.findall(r'<ul class="errorlist" id="([^"]+)_error">', response.content.decode())


def select_tag(body: str, select_id: str) -> str:
    return re.search(rf'<select [^>]*\bid="{select_id}">', body).group(0)


def only_job() -> Job:
    (job,) = Job.objects.all()
    return job


# --- the page -----------------------------------------------------------------------------


def test_it_shows_both_forms_with_a_label_for_every_field(client_for, member, project):
    response = client_for(member).get(PAGE)

    assert response.status_code == 200
    body = response.content.decode()
    assert "<h1>New job</h1>" in body
    assert "Vision" in body
    assert body.count('name="csrfmiddlewaretoken"') >= 2
    assert '<form id="container-form" method="post"' in body
    assert '<form id="finetune-form" method="post"' in body
    container_labels = {
        "name": "Job name",
        "image": "Image",
        "command": "Command",
        "script": "Script",
        "script_b64": "Script (base64)",
        "accelerator": "Accelerator",
        "gpu_count": "Count",
        "disk_gb": "Disk (GB)",
        "env": "Environment",
        "secrets": "Secrets",
        "max_runtime_hours": "Max runtime (hours)",
        "max_cost_usd": "Max cost (USD)",
        "max_price_usd_hr": "Price ceiling (USD/h)",
        "ssh_public_key": "SSH public key",
        "priority_class": "Priority class",
    }
    finetune_labels = {
        "name": "Job name",
        "model": "Model",
        "dataset": "Dataset",
        "dataset_format": "Dataset format",
        "max_samples": "Max samples",
        "max_steps": "Max steps",
        "learning_rate": "Learning rate",
        "accelerator": "Accelerator",
        "gpu_count": "Count",
        "disk_gb": "Disk (GB)",
        "priority_class": "Priority class",
    }
    for prefix, labels in (("container", container_labels), ("finetune", finetune_labels)):
        for field, label in labels.items():
            assert f'<label for="{prefix}-{field}">{label}</label>' in body
            assert f'id="{prefix}-{field}"' in body
    assert "Submit container job</button>" in body
    assert "Start fine-tune</button>" in body


def test_it_has_a_tab_for_each_kind_with_a_form_then_the_container_tab(client_for, member, project):
    """The fine-tune form comes from its kind (`JobKind.form_class`); serve jobs are started
    from an endpoint, so that kind has no form and no tab."""
    body = client_for(member).get(PAGE).content.decode()

    nav = re.search(r'<nav class="tabs" aria-label="Kind of job">(.*?)</nav>', body, re.S)
    tabs = re.findall(r'<a class="tab" href="#([^"]+)">([^<]+)</a>', nav.group(1))
    assert tabs == [("finetune", "Fine-tune"), ("container", "Container")]
    sections = re.findall(r'<section class="card new-job" id="([^"]+)"', body)
    assert sections == ["finetune", "container"]
    assert "serve" not in {form_id for form_id, _ in tabs}


def test_it_offers_the_catalog_and_every_gpu_count_with_sensible_defaults(
    client_for, member, project
):
    body = client_for(member).get(PAGE).content.decode()

    assert '<option value="cpu" selected>CPU only (no accelerator)</option>' in body
    assert '<option value="nvidia-l40s-48gb">NVIDIA L40S 48GB</option>' in body
    assert '<option value="8">8</option>' in body
    assert 'id="container-disk_gb" value="10"' in body.replace("\n", " ") or re.search(
        r'name="disk_gb" value="10"[^>]*id="container-disk_gb"', body
    )
    assert re.search(r'name="disk_gb" value="20"[^>]*id="finetune-disk_gb"', body)
    assert re.search(r'name="learning_rate" value="0.0002"[^>]*id="finetune-learning_rate"', body)
    for value, label in [
        ("alpaca", "Alpaca"),
        ("chatml", "ChatML"),
        ("sharegpt", "ShareGPT"),
        ("prompt_completion", "Prompt-completion"),
        ("text", "Plain text"),
        ("pretokenized", "Pre-tokenized"),
    ]:
        assert f'value="{value}"' in body and f">{label}</option>" in body


def test_the_first_render_quotes_the_initial_selection(client_for, member, project):
    body = client_for(member).get(PAGE).content.decode()

    container_quote = re.search(r'<div id="quote"[^>]*>(.*?)</div>', body, re.S).group(1)
    assert "Available now" in container_quote
    assert CPU_PRICE in container_quote
    finetune_quote = re.search(r'<div id="finetune-quote"[^>]*>(.*?)</div>', body, re.S).group(1)
    assert CPU_PRICE in finetune_quote


def test_the_selects_ask_for_the_live_quote(client_for, member, project):
    body = client_for(member).get(PAGE).content.decode()

    for select in ("container-accelerator", "container-gpu_count"):
        tag = select_tag(body, select)
        assert 'hx-get="/o/acme/quote/"' in tag
        assert 'hx-trigger="change"' in tag
        assert 'hx-target="#quote"' in tag
        assert 'hx-include="#container-accelerator, #container-gpu_count"' in tag
    assert 'hx-target="#finetune-quote"' in select_tag(body, "finetune-accelerator")


def test_a_viewer_is_refused(client_for, viewer, project):
    client = client_for(viewer)

    assert client.get(PAGE).status_code == 403
    assert client.post(PAGE, container_data(command="true")).status_code == 403
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "/o/globex/projects/secret-plans/jobs/new/",  # another org
        "/o/acme/projects/secret-plans/jobs/new/",  # another org's project inside yours
        "/o/acme/projects/nope/jobs/new/",
    ],
)
def test_another_orgs_page_or_an_unknown_project_is_404(
    client_for, member, project, other_project, url
):
    assert client_for(member).get(url).status_code == 404


def test_an_outsider_gets_404(client_for, outsider, project):
    client = client_for(outsider)

    assert client.get(PAGE).status_code == 404
    assert client.post(PAGE, container_data(command="true")).status_code == 404
    assert not Job.objects.exists()


def test_signed_out_goes_to_sign_in(client, project):
    response = client.get(PAGE)

    assert response.status_code == 302
    assert "/login" in response["Location"]


def test_a_post_without_a_known_form_is_400(client_for, member, project):
    response = client_for(member).post(PAGE, container_data(form="other", command="true"))

    assert response.status_code == 400
    assert not Job.objects.exists()


def test_a_post_for_a_kind_without_a_form_is_400_naming_the_forms(client_for, member, project):
    response = client_for(member).post(PAGE, container_data(form="serve", command="true"))

    assert response.status_code == 400
    assert response.content.decode() == "Say which form: form=container or form=finetune."
    assert not Job.objects.exists()


# --- the container form -------------------------------------------------------------------


def test_a_container_job_with_a_command_redirects_to_its_page(client_for, member, org, project):
    secret_services.secret_create(organization=org, name="hf", data={"HF_TOKEN": "hf_x"})
    response = client_for(member).post(
        PAGE,
        container_data(
            command="python -c 'print(\"hello world\")' --flag",
            env="EPOCHS=3\r\n\r\n# a comment\r\nGREETING=hello = world\r\n",
            secrets="HF_TOKEN=hf:HF_TOKEN\r\nTOKEN_TOO=hf:HF_TOKEN",
            max_runtime_hours="1.5",
            max_cost_usd="2.50",
            max_price_usd_hr="0.2",
            ssh_public_key=ED25519,
            disk_gb="15",
        ),
    )

    job = only_job()
    assert response.status_code == 302
    assert response["Location"] == f"/o/acme/jobs/{job.public_id}/"
    assert job.kind == Job.Kind.CONTAINER
    assert job.project == project
    assert job.organization == org
    assert job.created_by == member
    assert job.name == "train-resnet"
    assert (job.accelerator, job.gpu_count, job.ephemeral_disk_gb) == ("cpu", 1, 15)
    assert job.idempotency_key is None
    container = job.spec["container"]
    assert container["image"] == "python:3.11-slim"
    assert container["command"] == ["python", "-c", 'print("hello world")', "--flag"]
    assert container["script_b64"] is None
    assert container["env"] == {"EPOCHS": "3", "GREETING": "hello = world"}
    secret_id = org.secrets.get(name="hf").public_id
    assert container["secret_env"] == {
        "HF_TOKEN": {"secret_id": secret_id, "key": "HF_TOKEN"},
        "TOKEN_TOO": {"secret_id": secret_id, "key": "HF_TOKEN"},
    }
    assert job.spec["limits"] == {
        "max_runtime_hours": 1.5,
        "max_cost_micros": 2_500_000,
        "max_price_micros_hr": 200_000,
    }
    assert (job.max_runtime_hours, job.max_cost_micros, job.max_price_micros_hr) == (
        1.5,
        2_500_000,
        200_000,
    )
    assert job.spec["access"]["ssh_public_key"] == ED25519


def test_optional_fields_left_empty_stay_unset(client_for, member, project):
    client_for(member).post(PAGE, container_data(command="true"))

    job = only_job()
    assert job.spec["container"]["env"] == {}
    assert job.spec["container"]["secret_env"] == {}
    assert job.spec["limits"] == {
        "max_runtime_hours": None,
        "max_cost_micros": None,
        "max_price_micros_hr": None,
    }
    assert job.spec["access"] == {"ssh_public_key": None}


def test_a_script_is_sent_as_base64_with_unix_line_ends(client_for, member, project):
    response = client_for(member).post(
        PAGE, container_data(script="#!/bin/bash\r\necho hi\r\nsleep 1\r\n")
    )

    job = only_job()
    assert response.status_code == 302
    assert job.spec["container"]["command"] is None
    decoded = base64.b64decode(job.spec["container"]["script_b64"]).decode()
    assert decoded == "#!/bin/bash\necho hi\nsleep 1\n"


def test_a_pasted_base64_script_is_used_as_is(client_for, member, project):
    encoded = base64.b64encode(b"echo pasted\n").decode()
    wrapped = f"{encoded[:8]}\r\n{encoded[8:]}\r\n"

    response = client_for(member).post(PAGE, container_data(script_b64=wrapped))

    assert response.status_code == 302
    assert only_job().spec["container"]["script_b64"] == encoded


def test_bad_base64_is_reported_next_to_that_field(client_for, member, project):
    response = client_for(member).post(PAGE, container_data(script_b64="not base64!!"))

    assert response.status_code == 200
    assert field_errors(response, "container-script_b64") == ["Not valid base64."]
    assert all_field_error_ids(response) == ["container-script_b64"]
    assert not Job.objects.exists()
    body = response.content.decode()
    assert "not base64!!</textarea>" in body  # what was typed stays
    assert 'value="train-resnet"' in body


def test_an_empty_script_from_the_service_is_reported_next_to_the_script(
    client_for, member, project
):
    # Whitespace-only base64 content reaches the service, which says it is empty.
    response = client_for(member).post(
        PAGE, container_data(script_b64=base64.b64encode(b"  \n").decode())
    )

    assert field_errors(response, "container-script_b64") == ["The script is empty."]
    assert not Job.objects.exists()


def test_neither_command_nor_script_is_an_error_on_the_command(client_for, member, project):
    response = client_for(member).post(PAGE, container_data())

    assert response.status_code == 200
    assert field_errors(response, "container-command") == ["Give a command or a script."]
    assert not Job.objects.exists()


def test_both_a_command_and_a_script_is_an_error(client_for, member, project):
    response = client_for(member).post(PAGE, container_data(command="true", script="echo hi"))

    assert field_errors(response, "container-script") == [
        "Give one of a command, a script or a base64 script."
    ]
    assert not Job.objects.exists()


def test_a_command_that_does_not_split_is_an_error(client_for, member, project):
    response = client_for(member).post(PAGE, container_data(command="echo 'unclosed"))

    assert field_errors(response, "container-command") == [
        "This command does not split into words: No closing quotation."
    ]
    assert not Job.objects.exists()


def test_a_gpu_count_the_accelerator_lacks_is_reported_next_to_the_gpu_count(
    client_for, member, project
):
    response = client_for(member).post(
        PAGE, container_data(command="true", accelerator="nvidia-l40s-48gb", gpu_count="3")
    )

    assert response.status_code == 200
    assert field_errors(response, "container-gpu_count") == [
        "nvidia-l40s-48gb comes in gpu counts 1, 2, 4, 8."
    ]
    assert all_field_error_ids(response) == ["container-gpu_count"]
    assert not Job.objects.exists()
    body = response.content.decode()
    assert '<option value="3" selected>3</option>' in body
    assert " autofocus " in select_tag(body, "container-gpu_count")
    # The quote for the rejected selection says the same before the next try.
    quote = re.search(r'<div id="quote"[^>]*>(.*?)</div>', body, re.S).group(1)
    assert "NVIDIA L40S 48GB comes in GPU counts 1, 2, 4, 8, not 3." in quote


def test_a_malformed_env_line_is_a_field_error(client_for, member, project):
    response = client_for(member).post(
        PAGE, container_data(command="true", env="GOOD=1\nno equals sign\n=nothing")
    )

    assert field_errors(response, "container-env") == [
        "Line 2: expected NAME=value.",
        "Line 3: expected NAME=value.",
    ]
    assert not Job.objects.exists()


def test_a_reserved_env_name_from_the_service_lands_on_the_environment(client_for, member, project):
    response = client_for(member).post(
        PAGE, container_data(command="true", env="TRAINYARD_JOB=mine")
    )

    assert field_errors(response, "container-env") == [
        "TRAINYARD_JOB: Names starting with TRAINYARD_ are reserved for the platform."
    ]
    assert not Job.objects.exists()


def test_an_unknown_secret_name_is_a_field_error(client_for, member, org, project, other_org):
    secret_services.secret_create(organization=other_org, name="theirs", data={"K": "v"})
    secret_services.secret_create(organization=org, name="hf", data={"HF_TOKEN": "x"})

    response = client_for(member).post(
        PAGE, container_data(command="true", secrets="A=nope:KEY\nB=theirs:K\nC=hf:MISSING")
    )

    assert response.status_code == 200
    assert field_errors(response, "container-secrets") == [
        "A: no secret nope (by id or name) in this organization.",
        "B: no secret theirs (by id or name) in this organization.",
        "C: secret hf has no key MISSING.",
    ]
    assert not Job.objects.exists()


def test_a_malformed_secrets_line_is_a_field_error(client_for, member, org, project):
    secret_services.secret_create(organization=org, name="hf", data={"HF_TOKEN": "x"})

    response = client_for(member).post(
        PAGE, container_data(command="true", secrets="HF_TOKEN=hf\nno equals sign\nX=:KEY")
    )

    assert field_errors(response, "container-secrets") == [
        "Line 2: expected NAME=SECRET_ID:KEY.",
        "Line 3: expected NAME=SECRET_ID:KEY.",
    ]
    assert not Job.objects.exists()


def test_a_secret_line_without_a_key_reads_the_key_of_the_same_name(
    client_for, member, org, project
):
    secret = secret_services.secret_create(organization=org, name="hf", data={"HF_TOKEN": "x"})

    client_for(member).post(PAGE, container_data(command="true", secrets="HF_TOKEN=hf"))

    assert only_job().spec["container"]["secret_env"] == {
        "HF_TOKEN": {"secret_id": secret.public_id, "key": "HF_TOKEN"}
    }


def test_a_secret_given_by_id_as_on_the_cli_reaches_the_job_and_another_orgs_is_refused(
    client_for, member, org, project, other_org
):
    ours = secret_services.secret_create(organization=org, name="hf", data={"HF_TOKEN": "x"})
    theirs = secret_services.secret_create(organization=other_org, name="t", data={"K": "v"})
    client = client_for(member)

    refused = client.post(PAGE, container_data(command="true", secrets=f"K={theirs.public_id}:K"))
    assert field_errors(refused, "container-secrets") == [
        f"K: no secret {theirs.public_id} (by id or name) in this organization."
    ]
    assert not Job.objects.exists()

    response = client.post(
        PAGE,
        container_data(command="true", secrets=f"TOKEN={ours.public_id}:HF_TOKEN\nHF_TOKEN=hf"),
    )

    assert response.status_code == 302
    assert only_job().spec["container"]["secret_env"] == {
        "TOKEN": {"secret_id": ours.public_id, "key": "HF_TOKEN"},
        "HF_TOKEN": {"secret_id": ours.public_id, "key": "HF_TOKEN"},
    }


def test_the_page_lists_the_orgs_secrets_for_the_secrets_field(
    client_for, member, org, project, other_org
):
    secret_services.secret_create(organization=org, name="wandb", data={"API_KEY": "v"})
    secret_services.secret_create(organization=other_org, name="theirs", data={"K": "v"})

    body = client_for(member).get(PAGE).content.decode()

    assert "<code>wandb</code> (API_KEY)" in body
    assert "theirs" not in body


def test_a_malformed_ssh_key_is_a_field_error(client_for, member, project):
    response = client_for(member).post(
        PAGE, container_data(command="true", ssh_public_key="ssh-ed25519 not-a-key")
    )

    assert field_errors(response, "container-ssh_public_key") == [
        "Not an OpenSSH public key (expected e.g. 'ssh-ed25519 AAAA... you@host'): "
        "the key's second part is not base64."
    ]
    assert not Job.objects.exists()


def test_a_limit_the_service_rejects_lands_on_its_field(client_for, member, project):
    response = client_for(member).post(PAGE, container_data(command="true", max_cost_usd="-1"))

    assert field_errors(response, "container-max_cost_usd") == ["Must be greater than zero."]
    assert not Job.objects.exists()


def test_a_disabled_org_cannot_submit(client_for, member, org, project):
    org.compute_enabled = False
    org.save(update_fields=["compute_enabled"])
    client = client_for(member)

    assert "Compute is not enabled for Acme yet" in client.get(PAGE).content.decode()
    response = client.post(PAGE, container_data(command="true"))

    assert response.status_code == 200
    assert "Compute is not enabled for this organization yet." in response.content.decode()
    assert not Job.objects.exists()


# --- the fine-tune form -------------------------------------------------------------------


def test_a_fine_tune_creates_a_finetune_job_carrying_its_config(client_for, member, project):
    response = client_for(member).post(
        PAGE, finetune_data(max_samples="500", dataset_format="chatml", learning_rate="1e-4")
    )

    job = only_job()
    assert response.status_code == 302
    assert response["Location"] == f"/o/acme/jobs/{job.public_id}/"
    assert job.kind == Job.Kind.FINETUNE
    assert job.name == "support-bot"
    assert job.project == project
    assert job.created_by == member
    assert (job.accelerator, job.gpu_count, job.ephemeral_disk_gb) == ("cpu", 1, 20)
    container = job.spec["container"]
    assert container["image"] == "localhost/trainyard-trainer:0.1.0"
    assert container["command"] is None
    assert json.loads(container["env"][FINETUNE_CONFIG_ENV]) == {
        "model": "Qwen/Qwen2.5-0.5B-Instruct",
        "dataset": "tatsu-lab/alpaca",
        "dataset_format": "chatml",
        "max_samples": 500,
        "max_steps": None,
        "learning_rate": 0.0001,
    }
    script = base64.b64decode(container["script_b64"]).decode()
    assert "python -c 'import trainer'" in script
    assert TRAINER_MISSING in script
    assert 'python -m trainer --config-json "$FINETUNE_CONFIG"' in script


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"learning_rate": "0"}, "learning_rate", "Must be greater than zero."),
        ({"max_samples": "0"}, "max_samples", "Ensure this value is greater than or equal to 1."),
        ({"max_steps": "-5"}, "max_steps", "Ensure this value is greater than or equal to 1."),
        (
            {"dataset_format": "csv"},
            "dataset_format",
            "Select a valid choice. csv is not one of the available choices.",
        ),
        ({"model": ""}, "model", "This field is required."),
        ({"gpu_count": "2"}, "gpu_count", "cpu comes in gpu counts 1."),
    ],
)
def test_a_bad_fine_tune_field_is_reported_next_to_it(
    client_for, member, project, overrides, field, message
):
    response = client_for(member).post(PAGE, finetune_data(**overrides))

    assert response.status_code == 200
    assert field_errors(response, f"finetune-{field}") == [message]
    assert all_field_error_ids(response) == [f"finetune-{field}"]
    assert not Job.objects.exists()


CHATML = [
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]},
    {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]},
]


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


def test_the_dataset_field_offers_the_projects_uploaded_datasets(
    client_for, member, org, project, other_project, media
):
    toy = uploaded_dataset(project, name="Toy")
    chat = uploaded_dataset(project, name="Chats", dataset_format="chatml", rows=CHATML)
    elsewhere = uploaded_dataset(ProjectFactory(organization=org, slug="other"), name="Near")
    theirs = uploaded_dataset(other_project, name="Theirs")

    body = client_for(member).get(PAGE).content.decode()

    dataset_input = re.search(r'<input [^>]*id="finetune-dataset"[^>]*>', body).group(0)
    assert 'list="finetune-dataset-choices"' in dataset_input
    datalist = re.search(
        r'<datalist id="finetune-dataset-choices">(.*?)</datalist>', body, re.S
    ).group(1)
    options = re.findall(
        r'<option value="([^"]+)" data-format="([^"]+)">([^<]*)</option>', datalist
    )
    assert options == [  # newest first
        (chat.public_id, "chatml", "Chats · ChatML · 2 rows"),
        (toy.public_id, "alpaca", "Toy · Alpaca · 3 rows"),
    ]
    assert elsewhere.public_id not in body and theirs.public_id not in body
    assert 'src="/static/js/new-job.js"' in body


def test_a_project_without_datasets_links_to_the_upload(client_for, member, project):
    body = client_for(member).get(PAGE).content.decode()
    assert "No datasets uploaded to Vision yet" in body
    assert 'href="/o/acme/projects/vision/datasets/"' in body


def test_a_fine_tune_on_an_uploaded_dataset_names_it_by_id(client_for, member, project, media):
    chat = uploaded_dataset(project, name="Chats", dataset_format="chatml", rows=CHATML)

    response = client_for(member).post(
        PAGE, finetune_data(dataset=f" {chat.public_id} ", dataset_format="chatml")
    )

    assert response.status_code == 302
    config = json.loads(only_job().spec["container"]["env"][FINETUNE_CONFIG_ENV])
    assert (config["dataset"], config["dataset_format"]) == (chat.public_id, "chatml")


@pytest.mark.parametrize("whose", ["another project of the org", "another org"])
def test_a_dataset_of_another_project_cannot_be_used(
    client_for, member, org, project, other_project, media, whose
):
    owner = ProjectFactory(organization=org) if whose == "another project of the org" else None
    dataset = uploaded_dataset(owner or other_project)

    response = client_for(member).post(PAGE, finetune_data(dataset=dataset.public_id))

    assert response.status_code == 200
    assert field_errors(response, "finetune-dataset") == [
        f"No uploaded dataset {dataset.public_id} in project Vision."
    ]
    assert all_field_error_ids(response) == ["finetune-dataset"]
    assert not Job.objects.exists()


def test_an_uploaded_dataset_trains_only_as_the_format_it_was_checked_as(
    client_for, member, project, media
):
    toy = uploaded_dataset(project, name="Toy")

    response = client_for(member).post(
        PAGE, finetune_data(dataset=toy.public_id, dataset_format="sharegpt")
    )

    assert field_errors(response, "finetune-dataset_format") == [
        f"{toy.public_id} (Toy) was checked as Alpaca when it was uploaded; train it as Alpaca."
    ]
    assert all_field_error_ids(response) == ["finetune-dataset_format"]
    assert not Job.objects.exists()


@pytest.mark.parametrize("form", ["finetune", "container"])
def test_both_forms_offer_a_priority_class_standard_by_default(client_for, member, project, form):
    body = client_for(member).get(PAGE).content.decode()
    select = re.search(rf'<select [^>]*id="{form}-priority_class">(.*?)</select>', body, re.S)
    options = re.findall(r'<option value="(\w+)"( selected)?>(\w+)</option>', select.group(1))
    assert options == [("standard", " selected", "Standard"), ("preemptible", "", "Preemptible")]


@pytest.mark.parametrize(
    ("data", "posted", "expected"),
    [
        (finetune_data, "preemptible", "preemptible"),
        (finetune_data, "standard", "standard"),
        (finetune_data, None, "standard"),
        (container_data, "preemptible", "preemptible"),
        (container_data, None, "standard"),
    ],
)
def test_the_priority_class_chosen_is_the_jobs(client_for, member, project, data, posted, expected):
    fields = data(command="true") if data is container_data else data()
    if posted is None:
        fields.pop("priority_class", None)
    else:
        fields["priority_class"] = posted

    assert client_for(member).post(PAGE, fields).status_code == 302

    job = only_job()
    assert (job.priority_class, job.spec["priority_class"]) == (expected, expected)


def test_an_unknown_priority_class_is_a_field_error(client_for, member, project):
    response = client_for(member).post(PAGE, finetune_data(priority_class="urgent"))
    assert field_errors(response, "finetune-priority_class") == [
        "Select a valid choice. urgent is not one of the available choices."
    ]
    assert not Job.objects.exists()


def _run_script(tmp_path, *, trainer_installed: bool) -> subprocess.CompletedProcess:
    """Run the fine-tune script as the runner would (`bash script.sh`), with `python` a shim
    that hides site-packages, so whether `trainer` imports is up to this test."""

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "python"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    shim.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FINETUNE_CONFIG": '{"model": "m"}'}
    if trainer_installed:
        package = tmp_path / "lib" / "trainer"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "__main__.py").write_text("import sys\nprint(sys.argv[1:])\n")
        env["PYTHONPATH"] = str(tmp_path / "lib")
    script = tmp_path / "script.sh"
    script.write_text(FINETUNE_SCRIPT)
    return subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path
    )


def test_the_fine_tune_script_says_how_to_install_a_missing_trainer(tmp_path):
    result = _run_script(tmp_path, trainer_installed=False)

    assert result.returncode == 2
    assert result.stderr.strip() == TRAINER_MISSING
    assert result.stdout == ""


def test_the_fine_tune_script_hands_the_config_to_the_trainer(tmp_path):
    result = _run_script(tmp_path, trainer_installed=True)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['--config-json', '{\"model\": \"m\"}']"


# --- the quote partial --------------------------------------------------------------------


def test_the_quote_for_cpu_says_available_and_the_price(client_for, member, org):
    response = client_for(member).get(QUOTE, {"accelerator": "cpu", "gpu_count": "1"})

    assert response.status_code == 200
    body = response.content.decode()
    assert "Available now" in body
    assert CPU_PRICE in body
    assert "<html" not in body


def test_the_quote_for_an_accelerator_without_offers_says_not_available(client_for, member, org):
    response = client_for(member).get(QUOTE, {"accelerator": "nvidia-l40s-48gb", "gpu_count": "1"})

    assert response.status_code == 200
    body = response.content.decode()
    assert "Not available now" in body
    # Such a job holds two hours at the catalog's reference price ($1.50 per GPU-hour).
    assert "$3.00" in body


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"accelerator": "warp-drive", "gpu_count": "1"},
            "Choose an accelerator from the catalog.",
        ),
        ({"gpu_count": "1"}, "Choose an accelerator from the catalog."),
        ({"accelerator": "cpu", "gpu_count": "many"}, "Choose a count."),
        ({"accelerator": "cpu"}, "Choose a count."),
        (
            {"accelerator": "nvidia-l40s-48gb", "gpu_count": "3"},
            "NVIDIA L40S 48GB comes in GPU counts 1, 2, 4, 8, not 3.",
        ),
    ],
)
def test_the_quote_explains_a_selection_it_cannot_price(client_for, member, org, params, message):
    response = client_for(member).get(QUOTE, params)

    assert response.status_code == 200
    assert message in response.content.decode()
    assert "Available now" not in response.content.decode()


def test_the_quote_answers_an_htmx_request(client_for, member, org):
    response = client_for(member).get(
        QUOTE,
        {"accelerator": "cpu", "gpu_count": "1"},
        headers={"HX-Request": "true", "HX-Target": "quote"},
    )

    assert response.status_code == 200
    assert CPU_PRICE in response.content.decode()
    assert "no-cache" in response["Cache-Control"]


def test_a_viewer_may_ask_for_a_quote_but_an_outsider_may_not(client_for, viewer, outsider, org):
    params = {"accelerator": "cpu", "gpu_count": "1"}

    assert client_for(viewer).get(QUOTE, params).status_code == 200
    assert client_for(outsider).get(QUOTE, params).status_code == 404


def test_the_quote_is_get_only(client_for, member, org):
    assert client_for(member).post(QUOTE, {"accelerator": "cpu"}).status_code == 405


@pytest.mark.parametrize(
    ("param", "field", "message"),
    [
        ("name", "name", "Too long."),
        ("container.image", "image", "Too long."),
        ("container.command.0", "command", "Too long."),
        ("container.script_b64", "script", "Too long."),
        ("container.env.HF_ENDPOINT", "env", "HF_ENDPOINT: Too long."),
        ("container.secret_env.TOKEN", "secrets", "TOKEN: Too long."),
        ("compute.ephemeral_disk_gb", "disk_gb", "Too long."),
        ("limits.max_runtime_hours", "max_runtime_hours", "Too long."),
        ("limits.max_price_usd_hr", "max_price_usd_hr", "Too long."),
        ("access.ssh_public_key", "ssh_public_key", "Too long."),
        ("project", "__all__", "Too long."),
        (None, "__all__", "Too long."),
    ],
)
def test_each_service_param_lands_on_its_container_field(org, param, field, message):
    form = ContainerJobForm(data=container_data(command="true"), organization=org)
    assert form.is_valid()

    form.add_service_error(InvalidRequest("Too long.", param=param))

    assert form.errors == {field: [message]}
