import pytest

from archivist.settings import load_settings, mask_url, normalize_host
from archivist.tools.errors import ArchivistError


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("localhost:9999", "http://localhost:9999"),
        ("https://ollama.example", "https://ollama.example:443"),
        ("http://127.0.0.1:11434/", "http://127.0.0.1:11434"),
    ],
)
def test_ollama_host_is_read_the_way_ollama_reads_it(given, expected):
    assert normalize_host(given) == expected


def test_credentials_in_urls_are_masked():
    assert mask_url("https://user:secret@qdrant.example:6333") == "https://***@qdrant.example:6333"
    assert mask_url("http://127.0.0.1:6333") == "http://127.0.0.1:6333"


def test_the_environment_is_read_once_into_settings(tmp_path):
    settings = load_settings(
        {
            "OLLAMA_HOST": "gpu:11434",
            "ARCHIVIST_HOME": str(tmp_path),
            "ARCHIVIST_NUM_CTX": "4096",
            "ARCHIVIST_TIMEOUT": "12.5",
            "ARCHIVIST_CHAT_MODEL": "llama3.2:3b",
        }
    )
    assert settings.ollama_host == "http://gpu:11434"
    assert settings.home == tmp_path and settings.store_path.parent == tmp_path
    assert (settings.num_ctx, settings.timeout, settings.chat_model) == (4096, 12.5, "llama3.2:3b")


@pytest.mark.parametrize("name", ["ARCHIVIST_NUM_CTX", "ARCHIVIST_TIMEOUT", "ARCHIVIST_K"])
def test_a_bad_number_names_the_variable_to_fix(name):
    with pytest.raises(ArchivistError, match=name):
        load_settings({name: "lots"})
