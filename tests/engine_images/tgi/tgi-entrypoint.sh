#!/bin/bash
# As TGI's own: the launcher with the arguments, unquoted.
exec text-generation-launcher $@
