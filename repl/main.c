int main(void) { return 0; }  /* placeholder until the interpreter lands */
