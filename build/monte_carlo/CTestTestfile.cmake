# CMake generated Testfile for 
# Source directory: /work/main/monte_carlo
# Build directory: /work/main/build/monte_carlo
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
