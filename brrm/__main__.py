from brrm.cli import console

console()
