"""The driver JVM's class-data archive (AppCDS): where it is kept, when it is used."""

from __future__ import annotations

from kdissect.spark import session


def test_archive_is_kept_in_the_cache_directory_and_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("KDISSECT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KDISSECT_SPARK_CDS", raising=False)
    archive = session.class_data_archive()
    assert archive is not None and archive.parent == tmp_path and archive.suffix == ".jsa"
    # first run: the JVM writes the archive at exit; later runs map it
    assert f"-XX:ArchiveClassesAtExit={archive}" in session.class_data_options()
    archive.write_bytes(b"x")
    assert f"-XX:SharedArchiveFile={archive}" in session.class_data_options()
    monkeypatch.setenv("KDISSECT_SPARK_CDS", "0")
    assert session.class_data_archive() is None and session.class_data_options() == ""
    monkeypatch.delenv("KDISSECT_SPARK_CDS")
    monkeypatch.setenv("KDISSECT_CACHE_DIR", "")
    assert session.class_data_options() == ""


def test_another_java_gets_another_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("KDISSECT_CACHE_DIR", str(tmp_path))
    first = session.class_data_archive()
    fake_home = tmp_path / "jdk"
    (fake_home / "bin").mkdir(parents=True)
    java = fake_home / "bin" / "java"
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(fake_home))
    second = session.class_data_archive()
    assert first is not None and second is not None and first != second
