#!/bin/bash
# The stand-in's healthcheck.sh: healthy once the server answers on TCP (what the official image's
# `healthcheck.sh --connect --innodb_initialized` establishes; InnoDB is up before the port opens).
# mariadb-admin ping exits 0 also on "Access denied": it asks whether the server runs, not who may log in.
exec mariadb-admin --no-defaults --protocol=tcp --host=127.0.0.1 --port=3306 --connect-timeout=2 --silent ping > /dev/null 2>&1
