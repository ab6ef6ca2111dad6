# CMake generated Testfile for 
# Source directory: /work/main/theory
# Build directory: /work/main/build/theory
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
