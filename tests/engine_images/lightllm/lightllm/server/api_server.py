import sys

from stub_engine import main

main("lightllm", sys.argv[1:])
